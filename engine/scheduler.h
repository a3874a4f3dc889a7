// Scheduler: iteration-level continuous batching over a paged KV cache (rank 0).
//
// Each step it decides, from plain bookkeeping only, which sequences run and how many of
// their tokens: running sequences first (one token each when decoding, or their next
// prefill chunk), then waiting ones in arrival order (first come, first served) while the
// step's token budget and batch size allow. Prompts longer than the budget are prefilled
// in chunks across steps. KV blocks are taken as positions need them; when a running
// sequence cannot get one, the most recently admitted running sequence is preempted: its
// blocks are freed and it goes back to the front of the queue, to be recomputed from its
// tokens later. A sequence longer than the whole cache can never run and is reported so
// its request can fail. The result is a StepPlan of plain data (which sequences, which
// positions); the driver turns it into the step's ModelInput. Not thread-safe (the
// driver's step loop).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "engine/kv_cache.h"

namespace hearth {

struct SchedulerConfig {
  int32_t max_batch_size = 32;       // sequences per step (HEARTH_MAX_BATCH_SIZE)
  int32_t max_batched_tokens = 512;  // tokens per step, prefill chunks included
  int32_t max_waiting = 1024;        // sequences queued before add() refuses
  // 0: continuous batching. Otherwise static batching, for comparison: a batch starts
  // only when none is running, with max_batch_size sequences or after this many
  // milliseconds of waiting, and runs to its end before the next one is admitted.
  int32_t static_batch_timeout_ms = 0;
};

struct PlannedSeq {
  uint64_t id = 0;
  int32_t begin = 0;     // first position computed this step
  int32_t count = 0;     // positions computed this step
  bool sample = false;   // this step completes the known tokens: sample the next one
};

struct StepPlan {
  std::vector<PlannedSeq> seqs;        // in batch order
  std::vector<uint64_t> preempted;     // lost their KV this step; recomputed later
  std::vector<uint64_t> unschedulable; // need more KV than the whole cache: fail them
  int32_t tokens = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, BlockAllocator& blocks, int32_t block_size);

  // Queues a sequence with `n_tokens` known tokens (its prompt, or prompt plus output
  // when resuming). kResourceExhausted when the waiting queue is full; kInvalidArgument
  // for an id already present or a non-positive count.
  Status add(uint64_t id, int32_t n_tokens);
  // Plans the next step (empty when there is nothing to run). `now_ms` is any
  // monotonic clock in milliseconds (used by static batching only).
  StepPlan plan(int64_t now_ms = 0);
  // Records that a planned sequence ran: its positions up to begin + count are in the
  // KV cache, and when it sampled, it now knows one more token.
  void advance(const PlannedSeq& planned);
  // Removes a sequence (finished, cancelled or failed) and frees its blocks.
  void remove(uint64_t id);

  // The KV blocks of a sequence, in position order (empty while it waits).
  const KvSequence* kv(uint64_t id) const;
  bool contains(uint64_t id) const { return seqs_.contains(id); }
  int32_t n_running() const { return static_cast<int32_t>(running_.size()); }
  int32_t n_waiting() const { return static_cast<int32_t>(waiting_.size()); }
  int32_t blocks_used() const { return blocks_.total() - blocks_.free_count(); }
  // Running sequences sent back to waiting (their blocks freed) for lack of blocks, ever.
  uint64_t preemptions() const { return preemptions_; }

 private:
  struct Seq {
    int32_t n_tokens = 0;    // known tokens
    int32_t n_computed = 0;  // positions in the KV cache
    KvSequence kv;
  };
  bool reserve(Seq& seq, int32_t positions);
  void release(Seq& seq);
  void preempt_last();

  SchedulerConfig config_;
  BlockAllocator& blocks_;
  int32_t block_size_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<uint64_t> running_;  // admission order
  std::deque<uint64_t> waiting_;   // arrival order (preempted ones at the front)
  uint64_t preemptions_ = 0;
  std::unordered_map<uint64_t, int64_t> arrived_ms_;  // static batching: when each was added
  int64_t last_now_ms_ = 0;
};

}  // namespace hearth
