// The `tp` segment's binary layout: how the ranks of a tensor-parallel engine group find
// each other, agree on an epoch and exchange data on one host.
//
//   [TpHeader, 16 KiB] [step input area] [reduce buffers: rank x parity x reduce_floats]
//
// Rank 0 creates it (hearth.<instance>.tp) with the geometry it serves with; ranks
// 1..tp-1 attach. The header holds the group: its epoch (bumped by rank 0 each time it
// forms the group), the group state, the NCCL unique id of the epoch (GPU ranks), one
// entry per rank (pid, heartbeat, joined epoch, step counters) and the words the CPU
// collectives count and sleep on. Step inputs are ModelInput bytes, written by rank 0
// before a release store of `step_seq`. Every field another process writes after
// creation is an always-lock-free atomic; no pointers, offsets only.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "ipc/segment_prologue.h"
#include "ipc/weights_layout.h"

namespace hearth {

inline constexpr uint64_t kTpMagic = 0x5052475054525448ull;  // "HTRTPGRP" little-endian
inline constexpr uint32_t kTpLayoutVersion = 3;  // 3: lora_nonce
inline constexpr uint32_t kTpHeaderBytes = 16384;
inline constexpr SegmentKind kTpSegment{"tp", kTpMagic, kTpLayoutVersion, kTpHeaderBytes,
                                       "restart the engine group (rank 0) from this build"};
inline constexpr size_t kNcclIdBytes = 128;  // sizeof(ncclUniqueId)

// A rank's place in the group.
enum class TpRankState : uint32_t {
  kAbsent = 0,   // no process holds the entry
  kWaiting = 1,  // registered, in no group: ready for the next epoch
  kJoined = 2,   // a member of `epoch`
};

// The group as rank 0 sees it.
enum class TpGroupState : uint32_t {
  kNone = 0,     // no group: rank 0 waits for every rank to be kWaiting
  kForming = 1,  // rank 0 published a new epoch; ranks are joining it
  kActive = 2,   // every rank joined; steps run
  kBroken = 3,   // a rank died, fell silent or timed out: every member leaves the epoch
};
std::string_view tp_group_state_name(uint32_t state);

// Why a group broke (TpHeader::broken_why).
enum class TpBreak : uint32_t {
  kNone = 0,
  kRankGone = 1,    // a member's process is gone
  kRankSilent = 2,  // a member's heartbeat is stale
  kTimeout = 3,     // a collective waited longer than the collective timeout
  kStopped = 4,     // a rank stopped (SIGTERM)
  kJoinTimeout = 5, // a rank did not join a new epoch in time
};
std::string_view tp_break_name(uint32_t why);

// What rank 0 serves with; ranks 1..tp-1 build their KV cache and activations from it.
struct TpGeometry {
  int32_t context;
  int32_t kv_blocks;
  int32_t block_size;
  uint32_t kv_dtype;  // KvDType
  int32_t max_batch_tokens;
  int32_t n_heads;     // the model's, for describing shards
  int32_t n_kv_heads;
  int32_t reserved;
};

struct alignas(64) TpRankEntry {
  std::atomic<int32_t> pid;            // 0: free
  std::atomic<uint64_t> start_time;    // /proc start time: tells a reused pid apart
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC
  std::atomic<uint32_t> state;         // TpRankState
  std::atomic<uint64_t> epoch;         // the epoch it joined last
  std::atomic<uint64_t> step_taken;    // the last step_seq it copied (ranks 1..tp-1)
  std::atomic<uint64_t> steps;         // forward passes run, in all epochs
  std::atomic<uint64_t> step_ns;       // their time (collectives included)
  std::atomic<uint64_t> last_step_ns;  // the latest one's time
  std::atomic<uint64_t> cpu_mask;      // the CPUs 0..63 it is pinned to (0: not pinned)
  std::atomic<uint32_t> n_cpus;        // CPUs it may run on
  std::atomic<uint32_t> threads;       // compute threads
  // The id of the resident KV segment its share of the cache lives in (KvHeader::id; 0: a
  // private cache), set before it joins an epoch: rank 0 adopts its own tables only when
  // every rank's cache is the one they were written with.
  std::atomic<uint64_t> kv_id;
};

struct TpHeader {
  SegmentPrologue prologue;  // ipc/segment_prologue.h
  uint32_t tp_size;
  uint32_t reserved0;
  Fingerprint weights;     // the weights segment the group serves
  TpGeometry geometry;
  int32_t creator_pid;
  uint32_t reserved1;
  uint64_t creator_start_time;
  uint64_t created_unix_ms;
  uint64_t step_offset, step_capacity;  // rank 0's step input (ModelInput bytes)
  uint64_t reduce_offset, reduce_floats;  // per rank and parity
  // 1 once rank 0 replaced this segment by a new file at the same path: attach again.
  std::atomic<uint32_t> retired;
  std::atomic<uint32_t> group_state;  // TpGroupState
  std::atomic<uint64_t> epoch;        // bumped by rank 0 for every group it forms
  std::atomic<uint32_t> group_word;   // futex: bumped on every epoch or state change
  std::atomic<uint32_t> broken_why;   // TpBreak of the last break
  std::atomic<int32_t> broken_rank;   // the rank it was about (-1: none)
  std::atomic<uint64_t> formed;       // groups formed in this segment
  std::atomic<uint64_t> restarts;     // groups formed after a break
  // The adapter segment rank 0 serves (LoraHeader::nonce; 0: none), written when it
  // starts: a rank that attached another one does not join its epochs.
  std::atomic<uint64_t> lora_nonce;
  // The NCCL unique id of `epoch`, written by rank 0 before it publishes the epoch.
  unsigned char nccl_id[kNcclIdBytes];
  // Step channel: rank 0 writes step_bytes bytes at step_offset, then bumps step_seq.
  alignas(64) std::atomic<uint64_t> step_seq;
  std::atomic<uint64_t> step_bytes;
  std::atomic<uint32_t> step_word;    // futex: bumped with step_seq
  // CPU collectives: `arrive` counts arrivals at barriers (reset when an epoch forms).
  alignas(64) std::atomic<uint32_t> arrive;
  std::atomic<uint32_t> sleepers;     // ranks asleep on `arrive`
  TpRankEntry ranks[kMaxTensorParallel];
};
static_assert(sizeof(TpHeader) <= kTpHeaderBytes);
static_assert(std::is_standard_layout_v<TpHeader>);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

}  // namespace hearth
