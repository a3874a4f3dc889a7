#include "ipc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>

namespace hearth {

void futex_wait(const std::atomic<uint32_t>& word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  // The address of the atomic's value; std::atomic<uint32_t> is a plain 32-bit word.
  ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(const std::atomic<uint32_t>& word, int count) {
  ::syscall(SYS_futex, reinterpret_cast<const uint32_t*>(&word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace hearth
