// When a GPU communicator gives up on a collective: the decision of the NCCL
// communicator's watchdog thread (engine/tp/nccl_communicator.cpp), a pure function so that
// it is tested without a device.
//
// An NCCL collective that a peer never joins does not fail: its kernel spins on the
// device and the step loop waits on the stream forever. The watchdog looks every few tens
// of milliseconds at what it can read without the step loop's help (atomics of the tp
// segment, an event after the last collective, NCCL's asynchronous error) and aborts the
// communicator (ncclCommAbort), which ends the spinning kernels; the rank's next
// collective then fails with kUnavailable and the group re-forms, as for a CPU group.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

namespace hearth {

struct WatchdogObservation {
  uint64_t now_ns = 0;
  uint64_t pending_since_ns = 0;  // when the oldest unfinished collective was enqueued; 0: none
  bool epoch_over = false;        // the group's epoch was broken, or the segment replaced
  int gone_rank = -1;             // a peer whose process is gone or silent, else -1
  bool async_error = false;       // NCCL reported an error on the communicator
};

enum class WatchdogVerdict : uint8_t {
  kWait,          // nothing stuck, or not stuck for long enough
  kAbortError,    // NCCL failed asynchronously
  kAbortTimeout,  // a collective has not finished within the collective timeout
  kAbortEpochOver,  // a collective is pending in an epoch another rank ended
  kAbortRankGone,   // a collective is pending and a peer is gone
};

WatchdogVerdict collective_watchdog(const WatchdogObservation& seen, std::chrono::milliseconds collective_timeout);
std::string_view watchdog_verdict_name(WatchdogVerdict v);

}  // namespace hearth
