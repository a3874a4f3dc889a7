#include "ipc/futex.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

namespace hearth {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

TEST(FutexTest, AWordThatAlreadyDiffersReturnsAtOnce) {
  std::atomic<uint32_t> word{5};
  const auto t0 = Clock::now();
  futex_wait(word, 4, 10s);
  EXPECT_LT(Clock::now() - t0, 1s);
}

TEST(FutexTest, NobodyWakesMeansTheTimeout) {
  std::atomic<uint32_t> word{0};
  const auto t0 = Clock::now();
  futex_wait(word, 0, 50ms);
  const auto waited = Clock::now() - t0;
  EXPECT_GE(waited, 45ms);
  EXPECT_LT(waited, 5s);
}

TEST(FutexTest, ASignalWakesAThreadLongBeforeItsTimeout) {
  std::atomic<uint32_t> word{0};
  std::atomic<bool> woke{false};
  const auto t0 = Clock::now();
  std::thread waiter([&] {
    while (word.load() == 0) futex_wait(word, 0, 30s);
    woke.store(true);
  });
  std::this_thread::sleep_for(20ms);  // most likely asleep by now; correct either way
  futex_signal(word);
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_LT(Clock::now() - t0, 10s) << "woken, not timed out";
  EXPECT_EQ(word.load(), 1u) << "signal changes the word before waking";
}

// The broker's words live in shared memory between processes: the wake must cross them
// (a FUTEX_PRIVATE wait would never see a wake from another process).
TEST(FutexTest, AWakeCrossesProcesses) {
  void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(shared, MAP_FAILED);
  auto* word = new (shared) std::atomic<uint32_t>(0);
  auto* ready = new (static_cast<char*>(shared) + 64) std::atomic<uint32_t>(0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ready->store(1);
    futex_wake(*ready);
    const auto t0 = Clock::now();
    while (word->load() == 0 && Clock::now() - t0 < 20s) futex_wait(*word, 0, 30s);
    ::_exit(word->load() == 1 && Clock::now() - t0 < 20s ? 0 : 1);
  }
  while (ready->load() == 0) futex_wait(*ready, 0, 100ms);
  std::this_thread::sleep_for(20ms);
  const auto t0 = Clock::now();
  futex_signal(*word);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_LT(Clock::now() - t0, 10s);
  ::munmap(shared, 4096);
}

}  // namespace
}  // namespace hearth
