#include "engine/tp/collective_watchdog.h"

#include <gtest/gtest.h>

#include "engine/tp/tp_group.h"

namespace hearth {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kMs = 1000000;

WatchdogObservation pending_for(uint64_t ms) {
  WatchdogObservation o;
  o.pending_since_ns = 1000 * kMs;
  o.now_ns = o.pending_since_ns + ms * kMs;
  return o;
}

TEST(CollectiveWatchdogTest, AbortsOnlyWhatIsStuckOrCannotFinish) {
  const milliseconds timeout(500);
  EXPECT_EQ(collective_watchdog(WatchdogObservation{.now_ns = 5000 * kMs}, timeout), WatchdogVerdict::kWait);
  EXPECT_EQ(collective_watchdog(pending_for(499), timeout), WatchdogVerdict::kWait);
  EXPECT_EQ(collective_watchdog(pending_for(501), timeout), WatchdogVerdict::kAbortTimeout);

  // Nothing pending: an epoch that is over, or a gone peer, leaves nothing to stop.
  WatchdogObservation idle{.now_ns = 9000 * kMs, .epoch_over = true, .gone_rank = 1};
  EXPECT_EQ(collective_watchdog(idle, timeout), WatchdogVerdict::kWait);
  // Pending: at once, without waiting for the timeout.
  WatchdogObservation over = pending_for(1);
  over.epoch_over = true;
  EXPECT_EQ(collective_watchdog(over, timeout), WatchdogVerdict::kAbortEpochOver);
  WatchdogObservation gone = pending_for(1);
  gone.gone_rank = 2;
  EXPECT_EQ(collective_watchdog(gone, timeout), WatchdogVerdict::kAbortRankGone);
  // An asynchronous NCCL error: always.
  EXPECT_EQ(collective_watchdog(WatchdogObservation{.async_error = true}, timeout), WatchdogVerdict::kAbortError);
  // A clock read before the enqueue (threads race) is not a timeout.
  WatchdogObservation early = pending_for(0);
  early.now_ns -= 5 * kMs;
  EXPECT_EQ(collective_watchdog(early, timeout), WatchdogVerdict::kWait);
  for (auto v : {WatchdogVerdict::kAbortError, WatchdogVerdict::kAbortTimeout, WatchdogVerdict::kAbortEpochOver,
                 WatchdogVerdict::kAbortRankGone}) {
    EXPECT_NE(watchdog_verdict_name(v), "unknown");
  }
}

TEST(CollectiveWatchdogTest, GpuGroupsNeedNcclAndNameTheirDevice) {
  EXPECT_EQ(tp_group_cuda_device("cpu"), -1);
  EXPECT_EQ(tp_group_cuda_device("cpu-reference"), -1);
  EXPECT_EQ(tp_group_cuda_device("cuda"), 0);
  EXPECT_EQ(tp_group_cuda_device("cuda:3"), 3);
  EXPECT_TRUE(tp_group_check_backend("cpu", 4).is_ok());
  EXPECT_TRUE(tp_group_check_backend("cuda:0", 1).is_ok());
#if HEARTH_HAVE_NCCL
  EXPECT_TRUE(tp_group_check_backend("cuda:0", 2).is_ok());
#else
  const Status st = tp_group_check_backend("cuda:0", 2);
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("NCCL"), std::string::npos) << st.message();
#endif
}

}  // namespace
}  // namespace hearth
