// Scheduler: iteration-level continuous batching over a paged KV cache (rank 0).
//
// Each step it decides, from plain bookkeeping only, which sequences run and how many of
// their tokens: running sequences first (one token each when decoding, or their next
// prefill chunk), then waiting ones in arrival order (first come, first served) while the
// step's token budget and batch size allow. Prompts longer than the budget are prefilled
// in chunks across steps. KV blocks are taken as positions need them; when a running
// sequence cannot get one, the most recently admitted running sequence is preempted: its
// blocks are freed and it goes back to the front of the queue, to be recomputed from its
// tokens later. With prefix caching, a sequence admitted with nothing computed first
// takes the published blocks that hold its leading full blocks of tokens (found by
// their key chain, tokens compared) and starts computing after them; every block a
// sequence fills is published. Shared blocks are full, so nobody writes them again: a
// sequence that diverges inside a block computes that block in one of its own (at most
// block_size - 1 tokens again), and the last known token is always computed, in a
// block of its own, so that it has logits. A sequence longer than the whole cache can never run and is reported so
// its request can fail. The result is a StepPlan of plain data (which sequences, which
// positions); the driver turns it into the step's ModelInput. Not thread-safe (the
// driver's step loop).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "engine/core/kv_cache.h"

namespace hearth {

struct SchedulerConfig {
  int32_t max_batch_size = 32;       // sequences per step (HEARTH_MAX_BATCH_SIZE)
  int32_t max_batched_tokens = 512;  // tokens per step, prefill chunks included
  int32_t max_waiting = 1024;        // sequences queued before add() refuses
  // 0: continuous batching. Otherwise static batching, for comparison: a batch starts
  // only when none is running, with max_batch_size sequences or after this many
  // milliseconds of waiting, and runs to its end before the next one is admitted.
  int32_t static_batch_timeout_ms = 0;
  // Automatic prefix caching: a sequence admitted with tokens whose full blocks some
  // sequence computed before (and the allocator has not evicted) takes those blocks
  // instead of computing them again (hearth-engine --no-prefix-cache turns it off).
  bool prefix_caching = true;
  // The prefix cache's key chain seed; none: a random one per scheduler. A resident KV
  // cache keeps its seed, so that a restarted engine's keys find its blocks again.
  std::optional<BlockKey> chain_seed;
};

struct PlannedSeq {
  uint64_t id = 0;
  int32_t begin = 0;     // first position computed this step
  int32_t count = 0;     // positions computed this step, drafted ones included
  bool sample = false;   // this step completes the known tokens: sample the next one
  // Of `count`, the last `draft` are drafted tokens (speculative decoding) after the
  // known ones: each is sampled in turn, and kept while it matches (advance's `kept`).
  int32_t draft = 0;
};

struct StepPlan {
  std::vector<PlannedSeq> seqs;        // in batch order
  std::vector<uint64_t> preempted;     // lost their KV this step; recomputed later
  std::vector<uint64_t> unschedulable; // need more KV than the whole cache: fail them
  int32_t tokens = 0;
};

// The known tokens of a scheduled sequence (the prefix cache's view of its content).
using TokensOf = std::function<std::span<const TokenId>(uint64_t id)>;
// Tokens drafted for a running sequence about to decode, at most `room` (speculative
// decoding); the driver keeps what it drafted.
using DraftOf = std::function<int32_t(uint64_t id, int32_t room)>;

// A sampled row's fingerprint: the position it was computed at, its top token and that
// token's logit. Recomputing the row from an adopted KV cache must give it again.
struct RowCheck {
  int32_t pos = 0;
  TokenId token = 0;
  float logit = 0;
};

// Where a resident KV cache records what each sequence has in it (the engine's KV
// segment). Called from the step loop.
class KvJournal {
 public:
  virtual ~KvJournal() = default;
  // Before any block of `id` can go to another sequence (preempted, removed, failed).
  virtual void released(uint64_t id) = 0;
  // After a step wrote `id`'s positions below kv.length: its blocks, and the check of the
  // row it sampled at kv.length - 1 (none when it sampled nothing).
  virtual void committed(uint64_t id, const KvSequence& kv, const RowCheck* check) = 0;
};

class Scheduler {
 public:
  // `tokens_of` is read while planning and advancing, for prefix caching; none: no
  // prefix caching.
  Scheduler(const SchedulerConfig& config, BlockAllocator& blocks, int32_t block_size, TokensOf tokens_of = {});

  // Queues a sequence with `n_tokens` known tokens (its prompt, or prompt plus output
  // when resuming). kResourceExhausted when the waiting queue is full; kInvalidArgument
  // for an id already present or a non-positive count. Without `reuse_prefix` it takes
  // nothing from the prefix cache and computes every position (an embedding pooled over
  // every token's state needs them all); what it fills is published all the same. A
  // nonzero `prefix_salt` (a LoRA adapter's id) keys its blocks apart from those of the
  // same tokens under another salt: they hold another model's K/V.
  Status add(uint64_t id, int32_t n_tokens, bool reuse_prefix = true, uint64_t prefix_salt = 0);
  // Queues a sequence whose first adopted.length positions are already in the blocks of
  // `adopted` (an engine restart adopting the resident cache): it computes from there.
  // The blocks are moved out of `adopted` only when it is taken; an adoption that cannot
  // be used (nothing left to compute, too few blocks) leaves them there and the sequence
  // is queued to compute everything. An adopted sequence goes to the front of the queue.
  Status add(uint64_t id, int32_t n_tokens, KvSequence& adopted, uint64_t prefix_salt = 0);
  void set_journal(KvJournal* journal) { journal_ = journal; }
  // Asked, for each planned sequence about to decode one token (in batch order), how
  // many tokens it drafts; it gets that many more positions from what the step's budget
  // and free blocks have left once every sequence of the step has its own (so drafts
  // never keep a sequence out of a step, nor preempt one), else none.
  void set_drafts(DraftOf draft_of) { draft_of_ = std::move(draft_of); }
  // Plans the next step (empty when there is nothing to run). `now_ms` is any
  // monotonic clock in milliseconds (used by static batching only).
  StepPlan plan(int64_t now_ms = 0);
  // Records that a planned sequence ran: its known positions, and the first `kept` of its
  // drafted ones, are in the KV cache, and when it sampled, it now knows those drafts and
  // one more token. What its rejected drafts wrote is beyond its length (written over
  // later), and blocks holding only that are freed.
  void advance(const PlannedSeq& planned, int32_t kept = 0);
  // A running or waiting sequence knows `n` more tokens than it sampled (tokens put in
  // for it, such as a forced end of its reasoning): they are computed before it samples
  // again.
  void append(uint64_t id, int32_t n);
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
  // Prompt tokens of a sequence's first admission that came from the prefix cache.
  int32_t cached_tokens(uint64_t id) const;
  // Prefix cache totals over first admissions: tokens looked up, tokens found.
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }

 private:
  struct Seq {
    int32_t n_tokens = 0;    // known tokens
    int32_t n_computed = 0;  // positions in the KV cache
    KvSequence kv;
    std::vector<BlockKey> keys;  // of its leading full blocks, found or published
    int32_t cached = -1;         // tokens found at its first admission; -1 before it
    bool reuse_prefix = true;    // may take blocks from the prefix cache
    BlockKey seed;               // its key chain's seed: the scheduler's, salted
  };
  bool reserve(Seq& seq, int32_t positions);
  // Drafted positions for the plan's decoding sequences, from the budget left.
  void add_drafts(StepPlan& plan, int32_t budget);
  void release(uint64_t id, Seq& seq);
  void preempt_last();
  // Takes the cached blocks of a sequence about to be admitted with nothing computed.
  void take_cached_prefix(uint64_t id, Seq& seq);
  // Publishes the blocks a sequence has filled since.
  void publish_full_blocks(uint64_t id, Seq& seq);

  SchedulerConfig config_;
  BlockAllocator& blocks_;
  int32_t block_size_;
  std::unordered_map<uint64_t, Seq> seqs_;
  std::vector<uint64_t> running_;  // admission order
  std::deque<uint64_t> waiting_;   // arrival order (preempted ones at the front)
  uint64_t preemptions_ = 0;
  std::unordered_map<uint64_t, int64_t> arrived_ms_;  // static batching: when each was added
  int64_t last_now_ms_ = 0;
  TokensOf tokens_of_;
  BlockKey chain_seed_;  // random per scheduler: block keys cannot be predicted from outside
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  KvJournal* journal_ = nullptr;
  DraftOf draft_of_;
};

}  // namespace hearth
