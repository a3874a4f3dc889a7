// Communicator: what the ranks of a tensor-parallel engine group say to each other.
//
// The model calls all_reduce_sum after each row-parallel matmul (attention output,
// FFN down), so every rank ends a layer with the same full hidden state. Buffers are
// backend memory (host memory for the CPU backend), reduced in place. Every op is
// ordered on a DeviceQueue: the backend's stream for a GPU communicator (NCCL enqueues
// and returns), ignored by CPU communicators, which finish before returning.
//
// A collective fails instead of hanging: when a member is gone, silent, or takes longer
// than the group's collective timeout, the op returns kUnavailable and the group's
// epoch is over (tp_group.h); a communicator is bound to one epoch and a new epoch
// needs a new binding (ncclCommInitRank again on GPUs). Implementations: the single
// rank below, the shared-memory one of a CPU group (tp_group.h), NCCL for GPU ranks
// (nccl_communicator.h).
// Called from the step loop's thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "common/status.h"
#include "engine/core/backend.h"

namespace hearth {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data[i] = the sum over ranks of data[i], on every rank, summed in rank order so
  // that every rank gets the same bits.
  virtual Status all_reduce_sum(float* data, int64_t n, DeviceQueue queue = {}) = 0;
  // Every rank's `bytes` bytes at `data` become root's.
  virtual Status broadcast(void* data, size_t bytes, int root, DeviceQueue queue = {}) = 0;
  // Returns once every rank has called it.
  virtual Status barrier() = 0;
};

// A communicator bound to one epoch of a group at a time (tp_group.h): the group calls
// begin_epoch when this rank becomes a member of a new epoch, with the epoch's NCCL id
// (GPU groups) from the tp segment; every member calls it, and it may wait for the
// others up to `timeout` (ncclCommInitRank is collective).
class EpochCommunicator : public Communicator {
 public:
  virtual Status begin_epoch(uint64_t epoch, std::span<const unsigned char> nccl_id,
                             std::chrono::milliseconds timeout) = 0;
};

// One rank, alone: rank 0 of 1, every op a no-op.
std::unique_ptr<Communicator> make_single_rank_communicator();

}  // namespace hearth
