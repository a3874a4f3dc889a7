// cpu_relax: what a spin-wait loop does between two looks at the word it waits on (the
// x86 PAUSE hint: less power, and the sibling hyperthread gets the core's resources).
#pragma once

#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hearth {

// How long a waiter on another process spins before it sleeps: a partner a few
// microseconds behind costs no syscall, one further behind gets the core back (two
// processes may share cores).
inline constexpr uint64_t kSpinBeforeSleepNs = 30000;

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

}  // namespace hearth
