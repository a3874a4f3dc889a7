#include "engine/cpu/thread_pool.h"

#include <gtest/gtest.h>
#include <time.h>

#include <cstdlib>
#include <set>
#include <thread>
#include <vector>

namespace hearth {
namespace {

using namespace std::chrono_literals;

double process_cpu_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnceOpAfterOp) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int op = 0; op < 200; ++op) {
      const int64_t n = std::vector<int64_t>{0, 1, 2, 3, 7, 64, 1000}[static_cast<size_t>(op % 7)];
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      pool.parallel_for(n, [&](int64_t t) { runs[static_cast<size_t>(t)].fetch_add(1); });
      for (int64_t t = 0; t < n; ++t) {
        ASSERT_EQ(runs[static_cast<size_t>(t)].load(), 1) << threads << " threads, op " << op << ", task " << t;
      }
    }
  }
}

TEST(ThreadPoolTest, TheWorkIsShared) {
  ThreadPool pool(3);
  std::mutex m;
  std::set<std::thread::id> ids;
  // Tasks long enough that one thread cannot take them all before the others start.
  pool.parallel_for(12, [&](int64_t) {
    std::this_thread::sleep_for(5ms);
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPoolTest, IdleWorkersSleepAndWakeForTheNextOp) {
  ThreadPool pool(4, std::chrono::microseconds(3000));
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t t) { sum += t; });
  ASSERT_EQ(sum.load(), 4950);
  std::this_thread::sleep_for(50ms);  // past the 3 ms spin
  // Three spinning workers would burn ~0.9 s of CPU in 300 ms; sleeping ones nearly none.
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(300ms);
  const double idle_cpu = process_cpu_seconds() - before;
  EXPECT_LT(idle_cpu, 0.15) << "workers kept spinning while idle";
  sum = 0;
  pool.parallel_for(100, [&](int64_t t) { sum += t; });
  EXPECT_EQ(sum.load(), 4950) << "sleeping workers wake for the next op";
}

TEST(ThreadPoolTest, DefaultThreadCountFollowsHearthThreads) {
  ::setenv("HEARTH_THREADS", "3", 1);
  EXPECT_EQ(default_thread_count(), 3);
  ::unsetenv("HEARTH_THREADS");
  const int cores = default_thread_count();
  EXPECT_GE(cores, 1);
  for (const char* bad : {"0", "-2", "abc", "5000"}) {
    ::setenv("HEARTH_THREADS", bad, 1);
    EXPECT_EQ(default_thread_count(), cores) << "HEARTH_THREADS=" << bad << " is ignored";
  }
  ::unsetenv("HEARTH_THREADS");
  EXPECT_EQ(ThreadPool(0).size(), cores);
}

}  // namespace
}  // namespace hearth
