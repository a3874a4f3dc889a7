// The broker segment's binary layout: requests and their token streams between the
// frontends and the engine.
//
//   [BrokerHeader, 8 KiB] [request ring] [slot 0] ... [slot n-1]
//   slot: [SlotHeader] [prompt: int32 x slot_tokens] [produced: ProducedToken x slot_tokens]
//         [logit bias: LogitBias x kMaxLogitBias] [grammar: slot_grammar_bytes of GBNF text]
//
// An embedding request (a pooling in its flags) produces no tokens: the engine writes its
// pooled vector (float x model dim) over the produced area before the slot turns DONE.
//
// A slot is one sequence: its request (sampling parameters, stop ids, logit bias, the
// grammar constraining its output, prompt tokens) as written by the frontend that
// claimed it, and the tokens the engine produced for it,
// appended in order (an append-only stream: a restarted engine re-reads prompt and
// produced tokens to resume). Every field shared between processes is either written
// before a release store of `state` / `n_produced` and read after the matching acquire
// load, or an always-lock-free atomic. No pointers: offsets only.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/finish_reason.h"
#include "common/request_spec.h"
#include "ipc/ring.h"
#include "ipc/segment_prologue.h"

namespace hearth {

inline constexpr uint64_t kBrokerMagic = 0x524b4f5242525448ull;  // "HTRBROKR" little-endian
inline constexpr uint32_t kBrokerLayoutVersion = 9;  // 3: logit bias, min_tokens, grammar; 4: request ids, preemptions;
                                                     // 5: prefix-cache counts; 6: nonce, KV adoption counts;
                                                     // 7: embeddings (pooling flags, the vector in the produced
                                                     //    area), the thinking budget; 8: speculative
                                                     //    decoding counts; 9: the LoRA adapter
inline constexpr size_t kSpecPositions = 16;  // draft positions the broker counts acceptance at
inline constexpr size_t kClientRequestIdBytes = 128;  // the client's x-request-id, for the engine's log lines
inline constexpr uint32_t kBrokerHeaderBytes = 8192;
inline constexpr SegmentKind kBrokerSegment{"broker", kBrokerMagic, kBrokerLayoutVersion, kBrokerHeaderBytes,
                                           "restart hearth-engine from this build"};
inline constexpr int kMaxFrontends = 16;

// A slot's life: FREE -> FILLING (a frontend claimed it and writes the request) -> QUEUED
// (published, in the ring) -> RUNNING (the engine admitted it) -> DONE / CANCELLED /
// FAILED (terminal; the owner reads the rest and frees it) -> FREE.
enum class SlotState : uint32_t {
  kFree = 0,
  kFilling = 1,
  kQueued = 2,
  kRunning = 3,
  kDone = 4,
  kCancelled = 5,
  kFailed = 6,
};
std::string_view slot_state_name(uint32_t state);

// A registered frontend process.
struct alignas(64) FrontendEntry {
  std::atomic<int32_t> pid;              // 0: free entry
  std::atomic<uint64_t> start_time;      // /proc start time: tells a reused pid apart
  std::atomic<uint64_t> heartbeat_ns;    // CLOCK_MONOTONIC of its last heartbeat
  std::atomic<uint32_t> wake;            // futex word the engine bumps when its slots have news
  std::atomic<uint32_t> draining;        // 1 while it finishes its streams before exiting
};

struct BrokerHeader {
  SegmentPrologue prologue;  // ipc/segment_prologue.h
  uint32_t n_slots;
  uint32_t slot_tokens;      // prompt plus output tokens a slot holds (the context)
  uint64_t slot_stride;      // bytes per slot
  uint32_t slot_grammar_bytes;  // GBNF text a slot holds at most (hearth-engine --max-grammar-bytes)
  uint32_t nonce;  // random at creation: with created_unix_ms, names this broker (broker_id)
  uint64_t slots_offset;
  uint64_t ring_offset;
  uint64_t created_unix_ms;
  // The engine (rank 0).
  std::atomic<uint64_t> engine_epoch;        // bumped by every engine start
  std::atomic<int32_t> engine_pid;
  std::atomic<uint64_t> engine_start_time;
  std::atomic<uint64_t> engine_heartbeat_ns;  // CLOCK_MONOTONIC; 0 while no engine runs
  std::atomic<uint32_t> engine_wake;          // futex: bumped after enqueueing or cancelling
  // Engine statistics for hearth status and tests (written by the engine only).
  std::atomic<uint32_t> stat_running;
  std::atomic<uint32_t> stat_waiting;
  std::atomic<uint32_t> stat_kv_blocks_total;
  std::atomic<uint32_t> stat_kv_blocks_used;
  std::atomic<uint64_t> stat_steps;
  std::atomic<uint64_t> stat_tokens;
  std::atomic<uint64_t> stat_cancelled;       // sequences stopped by a cancel flag or a gone owner
  std::atomic<uint64_t> stat_reclaimed;       // slots of gone frontends returned to FREE
  std::atomic<uint64_t> next_request_id;
  std::atomic<uint64_t> stat_preemptions;     // running sequences sent back to waiting for lack of KV blocks
  std::atomic<uint64_t> stat_prefix_queries;  // prompt tokens looked up in the prefix cache (first admissions)
  std::atomic<uint64_t> stat_prefix_hits;     // of those, tokens found there
  std::atomic<uint64_t> stat_kv_adopted;      // resumed sequences that continued from the resident KV cache
  std::atomic<uint64_t> stat_kv_adopt_rejected;  // resumed sequences whose adopted cache failed its check: recomputed
  // Speculative decoding: sequence steps that drafted, tokens drafted, tokens kept, and
  // kept at each draft position (0: the first drafted token).
  std::atomic<uint64_t> stat_spec_drafts;
  std::atomic<uint64_t> stat_spec_draft_tokens;
  std::atomic<uint64_t> stat_spec_accepted;
  std::atomic<uint64_t> stat_spec_accepted_at[kSpecPositions];
  // The adapter segment the engine serves (LoraHeader::nonce; 0: none), set at its start:
  // a frontend whose segment differs names adapters the engine cannot run.
  std::atomic<uint64_t> engine_lora_nonce;
  FrontendEntry frontends[kMaxFrontends];
};
static_assert(sizeof(BrokerHeader) <= kBrokerHeaderBytes);
static_assert(std::is_standard_layout_v<BrokerHeader>);

struct ProducedToken {
  int32_t id;
  float logprob;                          // of `id` under the model's distribution
  int32_t top_ids[kMaxTopLogprobs];       // when the request asked for top logprobs; -1: none (a token put in)
  float top_logprobs[kMaxTopLogprobs];
};
static_assert(sizeof(ProducedToken) == 72);

struct alignas(64) SlotHeader {
  std::atomic<uint32_t> state;       // SlotState
  std::atomic<uint32_t> generation;  // bumped by each claim: tells reuses of the slot apart
  std::atomic<uint32_t> cancel;      // set by the owner: stop at the next step
  std::atomic<int32_t> n_produced;   // produced tokens published so far
  // The claiming frontend's registry index and pid, written right after the claim and
  // cleared (-1, 0) by the release, so a FREE slot names nobody. Atomics because the
  // engine's sweep reads them while a frontend may be writing them.
  std::atomic<int32_t> owner;
  std::atomic<int32_t> owner_pid;
  uint64_t request_id;
  SamplingParams sampling;  // common/sampling_params.h, as the request gave it
  int32_t max_tokens;
  int32_t n_prompt;
  int32_t top_logprobs;   // 0..kMaxTopLogprobs
  uint32_t flags;         // kSlotIgnoreStop, a Pooling in kSlotPoolingMask, kSlotReasoningOpen, kSlotThinkingBudget
  int32_t n_stop_ids;
  int32_t stop_ids[kMaxStopIds];
  int32_t min_tokens;     // stop ids are not sampled before this many tokens
  int32_t n_logit_bias;   // entries of the slot's logit-bias area, 0..kMaxLogitBias
  uint32_t grammar_bytes; // GBNF text in the slot's grammar area; 0: unconstrained
  uint32_t finish;        // FinishReason (common/finish_reason.h), valid in a terminal state
  int32_t error_code;     // ErrorCode, with FAILED
  char error[256];
  uint64_t enqueued_ns, first_token_ns, finished_ns;  // CLOCK_MONOTONIC
  uint64_t admitted_epoch;  // engine epoch that last admitted it
  int32_t cached_tokens;    // prompt tokens found in the prefix cache; written before the first token is published
  int32_t reasoning_budget;  // with kSlotThinkingBudget: RequestSpec's thinking budget and its tags' ids
  int32_t reasoning_start;
  int32_t reasoning_end;
  std::atomic<uint64_t> admitted_ns;  // CLOCK_MONOTONIC of its first admission (0 while QUEUED)
  int32_t adapter;          // RequestSpec::adapter and adapter_id: the LoRA adapter it runs with;
  uint64_t adapter_id;      // an id of 0 (no load has it) is the base model
  // The client's request id (printable ASCII, NUL-padded; not NUL-terminated when full).
  char client_request_id[kClientRequestIdBytes];
  // Followed by int32_t prompt[slot_tokens], ProducedToken produced[slot_tokens],
  // LogitBias logit_bias[kMaxLogitBias], char grammar[slot_grammar_bytes].
};
inline constexpr uint32_t kSlotIgnoreStop = 1;
inline constexpr uint32_t kSlotPoolingShift = 1;  // bits 1..2: the Pooling of an embedding request
inline constexpr uint32_t kSlotPoolingMask = 3u << kSlotPoolingShift;
inline constexpr uint32_t kSlotReasoningOpen = 1u << 3;  // the prompt opened the reasoning
inline constexpr uint32_t kSlotThinkingBudget = 1u << 4;  // reasoning_budget and the tags are set
inline constexpr uint32_t kSlotFlags = kSlotIgnoreStop | kSlotPoolingMask | kSlotReasoningOpen | kSlotThinkingBudget;

}  // namespace hearth
