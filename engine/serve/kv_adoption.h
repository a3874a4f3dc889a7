// The resident KV cache across engine restarts. ResidentKv is the step loop's journal of
// what each running sequence committed to the instance's KV segment (its block table and
// a check: one position's top token and logit). KvAdoption is a restarted engine's side:
// the RUNNING slots whose tables name blocks and a check are candidates; their check rows
// are computed again from the adopted cache, a batch at a time, and a candidate whose row
// matches continues from its blocks, any other is computed again. Nothing adopted is
// trusted before its check passed and the allocator's audit holds.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model_runner.h"
#include "engine/core/scheduler.h"
#include "ipc/broker.h"
#include "ipc/kv_segment.h"
#include "ipc/tp_segment.h"

namespace hearth {

// The resident KV cache's tables: what each running sequence has committed to the KV
// segment, kept by the step loop (KvJournal) so that a restarted engine can adopt it.
struct ResidentKv final : KvJournal, BlockObserver {
  struct Owner {
    uint32_t slot = 0;
    uint64_t request_id = 0;
    uint32_t generation = 0;
  };
  KvSegment segment;
  std::unordered_map<uint64_t, Owner> owners;  // sequence id -> its broker slot and request

  explicit ResidentKv(KvSegment s) : segment(std::move(s)) {}

  void released(uint64_t id) override {
    const auto it = owners.find(id);
    if (it != owners.end()) segment.table(it->second.slot).committed.store(0, std::memory_order_release);
  }

  void committed(uint64_t id, const KvSequence& kv, const RowCheck* check) override;

  void published(int32_t block, const BlockKey& key, std::span<const TokenId> tokens) override {
    KvBlockRecord& r = segment.record(block);
    r.published.store(0, std::memory_order_relaxed);
    r.key[0] = key.hi;
    r.key[1] = key.lo;
    std::copy(tokens.begin(), tokens.end(), r.tokens());
    r.published.store(1, std::memory_order_release);
  }
  void unpublished(int32_t block) override { segment.record(block).published.store(0, std::memory_order_release); }

  // A slot's table trusts nothing any more.
  void void_table(uint32_t slot) {
    KvSlotTable& t = segment.table(slot);
    t.committed.store(0, std::memory_order_release);
    t.check.store(0, std::memory_order_release);
  }

  // Publishes again every block the segment's index names; returns how many.
  int32_t restore_index(BlockAllocator& blocks) const {
    const int32_t bs = segment.header().geometry.block_size;
    int32_t n = 0;
    for (int32_t b = 0; b < segment.header().geometry.n_blocks; ++b) {
      KvBlockRecord& r = segment.record(b);
      if (r.published.load(std::memory_order_acquire) != 1) continue;
      if (blocks.restore(b, {r.key[0], r.key[1]}, std::span<const TokenId>(r.tokens(), static_cast<size_t>(bs)))) {
        ++n;
      } else {
        r.published.store(0, std::memory_order_release);  // inconsistent with the tables: forgotten
      }
    }
    return n;
  }
};

// A RUNNING slot that a restarted engine may continue from the adopted cache, once its
// check row is computed again and matches.
struct AdoptCandidate {
  uint32_t slot = 0;
  SlotRequest request;
  KvSequence kv;       // its blocks, held in the allocator; kv.length positions trusted
  int32_t committed = 0;  // the table's (kv.length may be one less: the last known token is computed again)
  int32_t check_pos = 0;
  TokenId check_token = 0;
  float check_logit = 0;
};

class KvAdoption {
 public:
  KvAdoption(ResidentKv& resident, KvCache& cache) : resident_(resident), cache_(cache) {}

  // Whether slot `index`'s table is for this request (`request_id`, the slot's claim)
  // and names blocks and a check it can be verified by; then it waits, holding its
  // blocks, for adopt().
  bool consider(uint32_t index, uint64_t request_id, SlotRequest& r);

  // How checks are recomputed: rows per step, and the vocabulary (a row's length).
  struct VerifyBatch {
    int32_t rows = 1;
    int32_t vocab_size = 0;
  };
  // How a candidate goes on: into the driver with its blocks (adopted), or with none.
  using Enter = std::function<void(uint32_t slot, SlotRequest request, KvSequence kv)>;
  // Recomputes each candidate's check row, enters every candidate, counts the outcome in
  // `stats` and restores the prefix cache's index when everything passed.
  Status adopt(ModelRunner& runner, const VerifyBatch& batch, BrokerHeader& stats, const Enter& enter);

  // With tensor parallelism: voids the tables unless each rank (as the tp segment says)
  // holds the share of the cache they were written with.
  void reconcile_ranks(const TpSegment& tp, uint32_t n_slots);

  // The group broke: the candidates let go of their blocks.
  void drop() {
    for (AdoptCandidate& c : pending_) kv_sequence_release(cache_, c.kv);
    pending_.clear();
  }

 private:
  Status verify(ModelRunner& runner, const VerifyBatch& batch, const std::vector<AdoptCandidate>& pending,
                std::vector<uint8_t>& ok);
  size_t reject_double_claims(std::vector<AdoptCandidate>& pending);

  ResidentKv& resident_;
  KvCache& cache_;
  std::vector<AdoptCandidate> pending_;
};

}  // namespace hearth
