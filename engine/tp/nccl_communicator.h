// The communicator of GPU ranks: NCCL, one communicator per group epoch, collectives on
// the backend's stream (DeviceQueue), and a watchdog thread that aborts a collective
// stuck because a peer is gone, the epoch is over or the collective timeout passed
// (collective_watchdog.h), so a hung group restarts instead of waiting forever. Built
// when the CUDA toolkit has NCCL (HEARTH_HAVE_NCCL).
//
// Results: NCCL's all-reduce gives every rank the same bits, but sums in its own order
// (ring or tree), not rank order as the CPU group does: TP=n agrees with TP=1 up to float
// tolerance, as DESIGN.md asks.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <span>

#include "common/status.h"
#include "engine/tp/collective_watchdog.h"
#include "engine/core/communicator.h"

namespace hearth {

// A fresh NCCL unique id (rank 0, before it publishes an epoch) into `out`, which holds
// exactly sizeof(ncclUniqueId) (128) bytes.
Status nccl_unique_id(std::span<unsigned char> out);

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;  // the CUDA device of this rank's backend
  std::chrono::milliseconds collective_timeout{30000};
  // What the watchdog reads of the group between collectives: whether the epoch is over
  // and which peer is gone. Called from the watchdog thread: it may read atomics only.
  std::function<void(uint64_t epoch, WatchdogObservation&)> observe;
};

std::unique_ptr<EpochCommunicator> make_nccl_communicator(NcclOptions options);

}  // namespace hearth
