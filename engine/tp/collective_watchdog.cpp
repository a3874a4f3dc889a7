#include "engine/tp/collective_watchdog.h"

namespace hearth {

WatchdogVerdict collective_watchdog(const WatchdogObservation& seen, std::chrono::milliseconds collective_timeout) {
  if (seen.async_error) return WatchdogVerdict::kAbortError;
  if (seen.pending_since_ns == 0) return WatchdogVerdict::kWait;  // nothing on the device to stop
  if (seen.epoch_over) return WatchdogVerdict::kAbortEpochOver;
  if (seen.gone_rank >= 0) return WatchdogVerdict::kAbortRankGone;
  const auto timeout_ns = static_cast<uint64_t>(std::chrono::nanoseconds(collective_timeout).count());
  if (seen.now_ns > seen.pending_since_ns && seen.now_ns - seen.pending_since_ns > timeout_ns) {
    return WatchdogVerdict::kAbortTimeout;
  }
  return WatchdogVerdict::kWait;
}

std::string_view watchdog_verdict_name(WatchdogVerdict v) {
  switch (v) {
    case WatchdogVerdict::kWait: return "wait";
    case WatchdogVerdict::kAbortError: return "NCCL reported an error";
    case WatchdogVerdict::kAbortTimeout: return "a collective did not finish within the collective timeout";
    case WatchdogVerdict::kAbortEpochOver: return "another rank ended the epoch while a collective was pending";
    case WatchdogVerdict::kAbortRankGone: return "a peer rank is gone while a collective was pending";
  }
  return "unknown";
}

}  // namespace hearth
