#include "common/test_point.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/test_util.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;

class TestPointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!test_points_compiled()) GTEST_SKIP() << "this build has no test points (HEARTH_TEST_POINTS=OFF)";
  }
  void TearDown() override { test_point_clear(); }
};

TEST_F(TestPointTest, CallbacksRunAtTheirPointAndPassesAreCounted) {
  int runs = 0;
  test_point_set_callback("t.a", [&] { ++runs; });
  HEARTH_TEST_POINT("t.a");
  HEARTH_TEST_POINT("t.a");
  HEARTH_TEST_POINT("t.other");
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(test_point_passes("t.a"), 2u);
  EXPECT_EQ(test_point_passes("t.other"), 1u);
  test_point_clear();
  HEARTH_TEST_POINT("t.a");
  EXPECT_EQ(runs, 2) << "cleared";
  EXPECT_EQ(test_point_passes("t.a"), 0u);
}

TEST_F(TestPointTest, AnOrderMakesTheSuccessorWait) {
  test_point_order({{"t.first", "t.second"}});
  std::mutex m;
  std::vector<std::string> seen;
  std::thread later([&] {
    HEARTH_TEST_POINT("t.second");  // waits for t.first
    std::lock_guard lock(m);
    seen.push_back("second");
  });
  std::this_thread::sleep_for(50ms);  // give `later` every chance to run ahead (it must not)
  {
    std::lock_guard lock(m);
    seen.push_back("first");
  }
  HEARTH_TEST_POINT("t.first");
  later.join();
  EXPECT_EQ(seen, (std::vector<std::string>{"first", "second"}));
}

TEST_F(TestPointTest, ClearReleasesAWaiter) {
  test_point_order({{"t.never", "t.blocked"}});
  std::thread waiter([] { HEARTH_TEST_POINT("t.blocked"); });
  std::this_thread::sleep_for(20ms);
  test_point_clear();
  waiter.join();  // returns: the order is gone
  SUCCEED();
}

// Kill and delay points read the environment once per process: each runs in a fresh
// process (a death test in the "threadsafe" style re-executes the test binary).
TEST_F(TestPointTest, AKillPointSigkillsAtItsNthPassAndSaysWhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // The child re-runs this test from the start: it takes the log's path from the parent.
  testing::TempDir dir;
  const char* inherited = std::getenv("HEARTH_TEST_KILL_LOG");
  const std::string log = inherited != nullptr ? inherited : (dir.path() / "kill.log").string();
  ::setenv("HEARTH_TEST_KILL_LOG", log.c_str(), 1);
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_KILL_POINT", "t.kill:3", 1);
        ::setenv("HEARTH_KILL_LOG", log.c_str(), 1);
        HEARTH_TEST_POINT("t.kill");
        HEARTH_TEST_POINT("t.elsewhere");
        HEARTH_TEST_POINT("t.kill");
        std::fprintf(stderr, "alive after two passes\n");
        HEARTH_TEST_POINT("t.kill");
        std::fprintf(stderr, "not reached\n");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "alive after two passes");
  ::unsetenv("HEARTH_TEST_KILL_LOG");
  std::ifstream in(log);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "t.kill");
}

TEST_F(TestPointTest, KillAfterMsCountsOnlyLaterPasses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_KILL_POINT", "t.kill", 1);
        ::setenv("HEARTH_KILL_AFTER_MS", "200", 1);
        HEARTH_TEST_POINT("t.kill");  // too early: not counted
        std::fprintf(stderr, "survived the early pass\n");
        std::this_thread::sleep_for(250ms);
        HEARTH_TEST_POINT("t.kill");
        std::exit(0);
      },
      ::testing::KilledBySignal(SIGKILL), "survived the early pass");
}

TEST_F(TestPointTest, ADelayPointSleepsAtEachPass) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_DELAY_POINT", "t.slow:100", 1);
        const auto t0 = std::chrono::steady_clock::now();
        HEARTH_TEST_POINT("t.slow");
        HEARTH_TEST_POINT("t.slow");
        const auto slow = std::chrono::steady_clock::now() - t0;
        HEARTH_TEST_POINT("t.fast");
        std::exit(slow >= 200ms ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace hearth
