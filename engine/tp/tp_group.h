// TpGroup: this process's membership of a tensor-parallel engine group, over the
// instance's `tp` segment (ipc/tp_layout.h).
//
// Lifecycle. Rank 0 forms a group when every rank is registered and waiting: it bumps
// the epoch (after resetting the collective counters and writing the epoch's NCCL id),
// the others join it, and once all have, the group is active. Any member that sees
// another gone (pid), silent (heartbeat older than rank_stale) or a collective that
// waits longer than collective_timeout breaks the epoch; every member then leaves it
// (its collectives and step waits fail with kUnavailable) and waits for the next one.
// A collective group cannot lose a member, so a break ends the epoch for all; the
// processes that are still alive stay up and rank 0 re-forms the group when the lost
// rank is back (its supervisor restarts it), then resumes its requests from the broker.
//
// Steps. Rank 0 publishes each step's ModelInput bytes (StepSink) before running it;
// ranks 1..tp-1 take them with next_step and run the same step on their shard. The
// shared-memory communicator (communicator()) implements the collectives for CPU ranks:
// arrival counting on one word, a short spin then a futex sleep, double-buffered
// reduce buffers so each all-reduce costs one barrier; its checks for gone ranks and
// timeouts run while it sleeps. GPU ranks (cuda_device >= 0) use NCCL instead
// (nccl_communicator.h): rank 0 writes a fresh NCCL id with each epoch, and every member
// forms that epoch's communicator as it joins. The step channel and the NCCL id are what
// a multi-host transport replaces (DESIGN.md, "Tensor parallel").
// Not thread-safe: the step loop's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "engine/tp/collective_watchdog.h"
#include "engine/core/communicator.h"
#include "engine/core/model_input.h"
#include "engine/core/model_runner.h"
#include "ipc/tp_segment.h"

namespace hearth {

struct TpGroupOptions {
  int rank = 0;
  std::chrono::milliseconds collective_timeout{30000};  // one collective's longest wait
  std::chrono::milliseconds rank_stale{30000};          // a heartbeat older than this: silent
  std::chrono::milliseconds join_timeout{10000};        // ranks must join a new epoch within
  int cuda_device = -1;  // >= 0: the ranks run on GPUs and talk over NCCL (this rank's device)
};

// Whether a group of `tp` ranks on `backend` ("cpu", "cuda:N") has a communicator in
// this build: GPU groups of more than one rank need NCCL.
Status tp_group_check_backend(std::string_view backend, int tp);
// TpGroupOptions::cuda_device for `backend`: its device for "cuda[:N]", else -1.
int tp_group_cuda_device(std::string_view backend);

class TpGroup final : public StepSink {
 public:
  // Takes a segment this process has registered `options.rank` in.
  TpGroup(TpSegment segment, const TpGroupOptions& options);
  ~TpGroup() override;
  TpGroup(const TpGroup&) = delete;
  TpGroup& operator=(const TpGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return size_; }
  const TpSegment& segment() const { return segment_; }
  // The epoch this rank is a member of (0: none).
  uint64_t epoch() const { return joined_ ? epoch_ : 0; }
  // A member of an epoch that no rank has broken.
  bool active() const;
  // The shared-memory communicator (single-rank for a group of one), bound to epoch().
  Communicator& communicator() { return *comm_; }

  // Rank 0: forms a group, waiting up to `wait`; true once active. Fails when the
  // segment was replaced.
  Result<bool> form(std::chrono::milliseconds wait);
  // Ranks 1..tp-1: joins the next epoch rank 0 forms, waiting up to `wait`; true once a
  // member. Fails when the segment was replaced (attach again).
  Result<bool> join(std::chrono::milliseconds wait);
  // Ends this rank's membership, breaking the epoch for every rank when it still runs
  // (a rank that stops, or rank 0 after a failed step). Idempotent.
  void leave(TpBreak why);
  // Rank 0 between steps: whether every member is alive and heartbeating; breaks the
  // epoch (kUnavailable, saying who) when one is not.
  Status check_members();

  // StepSink (rank 0): makes `input` the next step of every other rank.
  Status publish(const ModelInput& input) override;
  // Ranks 1..tp-1: the next step rank 0 published, waiting up to `wait`; false when
  // none came. Fails when the epoch broke.
  Result<bool> next_step(ModelInput& out, std::chrono::milliseconds wait);

  void heartbeat() const;
  // Records a step's forward time in this rank's entry (hearth status, /metrics).
  void note_step(uint64_t ns) const;
  // Notes the CPUs and threads this rank computes on.
  void note_cpus(uint64_t mask, uint32_t n_cpus, uint32_t threads) const;

  // Waits inside collectives and step waits: fails when the epoch is over, a member is
  // gone or silent, or `started_ns` is more than collective_timeout ago (breaking the
  // epoch in the last two cases). Public for the communicator.
  Status wait_check(uint64_t started_ns, bool idle);

  // "epoch 3 broke: rank 1 (pid 4242) is gone" and the like.
  std::string broken_message() const;

 private:
  Status break_epoch(TpBreak why, int about);
  Status members_alive(uint64_t now);

  TpSegment segment_;
  TpGroupOptions options_;
  int size_ = 1;
  bool joined_ = false;
  uint64_t epoch_ = 0;
  uint64_t last_seq_ = 0;  // the step_seq taken last (ranks 1..tp-1)
  uint64_t last_member_check_ns_ = 0;
  // The watchdog's view of the group (NCCL communicator, its thread): atomics only.
  void observe(uint64_t epoch, WatchdogObservation& seen) const;

  std::unique_ptr<Communicator> comm_;
  EpochCommunicator* epoch_comm_ = nullptr;  // comm_ when it follows epochs (more than one rank)
  bool nccl_ = false;
  std::vector<std::byte> bytes_;  // a step's bytes, reused
};

}  // namespace hearth
