// Which instruction-set path the CPU kernels take, chosen at run time from cpuid.
//
// kAvx512 needs AVX-512 F/BW/VL/VNNI (and F16C, FMA); kAvx2 needs AVX2, FMA and F16C;
// kScalar runs anywhere and is the path the others are tested against. The choice can
// be narrowed with HEARTH_CPU_ISA=scalar|avx2|avx512 or, in tests, cpu_isa_force().
// Thread-safe (the choice is an atomic).
#pragma once

#include <string_view>

namespace hearth::kernels::cpu {

enum class CpuIsa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

std::string_view cpu_isa_name(CpuIsa isa);

// The best path this CPU supports.
CpuIsa cpu_isa_detected();

// The path in use: the detected one, narrowed by HEARTH_CPU_ISA or cpu_isa_force().
CpuIsa cpu_isa();

// Uses `isa` from now on; returns false (and changes nothing) when the CPU lacks it.
bool cpu_isa_force(CpuIsa isa);

}  // namespace hearth::kernels::cpu
