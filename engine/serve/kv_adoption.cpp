#include "engine/serve/kv_adoption.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

#include "common/log.h"
#include "common/test_point.h"

namespace hearth {
namespace {

// Whether a recomputed row agrees with the recorded one: the same top token (or one
// within the tolerance of the top, for rows with near ties) and the same logit, up to
// what a different batch shape changes in float arithmetic (0.2%).
bool check_matches(std::span<const float> row, TokenId token, float logit) {
  if (token < 0 || static_cast<size_t>(token) >= row.size()) return false;
  const float tolerance = 2e-3f * std::max(1.0f, std::fabs(logit));
  const float top = *std::max_element(row.begin(), row.end());
  const float got = row[static_cast<size_t>(token)];
  return std::isfinite(got) && got >= top - tolerance && std::fabs(got - logit) <= tolerance;
}

}  // namespace

void ResidentKv::committed(uint64_t id, const KvSequence& kv, const RowCheck* check) {
  const auto it = owners.find(id);
  if (it == owners.end()) return;
  const Owner& o = it->second;
  KvSlotTable& t = segment.table(o.slot);
  const auto max_blocks = static_cast<size_t>(segment.header().geometry.max_blocks);
  if (kv.blocks.size() > max_blocks) {  // cannot happen within the context; then trust nothing
    t.committed.store(0, std::memory_order_release);
    return;
  }
  if (t.committed.load(std::memory_order_relaxed) == 0 || t.request_id != o.request_id ||
      t.generation != o.generation) {
    t.committed.store(0, std::memory_order_release);
    t.request_id = o.request_id;
    t.generation = o.generation;
    t.check.store(0, std::memory_order_relaxed);
  }
  std::copy(kv.blocks.begin(), kv.blocks.end(), t.blocks());
  t.n_blocks = static_cast<int32_t>(kv.blocks.size());
  if (check != nullptr) {  // no moment where an old check names the new logit
    t.check.store(0, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    t.check_logit = check->logit;
    t.check.store(kv_check_pack(check->pos, check->token), std::memory_order_release);
  }
  HEARTH_TEST_POINT("engine.kv.commit");  // the table written, `committed` not yet advanced
  t.committed.store(kv.length, std::memory_order_release);
}

// Whether slot `index`'s table in the adopted KV segment is for this request and names
// blocks and a check it can be verified by; then it waits in pending_, holding its
// blocks, for adopt().
bool KvAdoption::consider(uint32_t index, uint64_t request_id, SlotRequest& r) {
  KvSlotTable& t = resident_.segment.table(index);
  const int32_t committed = t.committed.load(std::memory_order_acquire);
  const uint64_t check = t.check.load(std::memory_order_acquire);
  const int32_t bs = cache_.config().block_size;
  const auto n_tokens = static_cast<int32_t>(r.tokens.size());
  const int32_t pos = kv_check_pos(check);
  if (committed <= 0 || committed > n_tokens || check == 0 || t.request_id != request_id ||
      t.generation != r.generation || pos < 0 || pos >= committed || pos >= n_tokens) {
    // Nothing committed for it, a table torn by a crash mid-commit, or one that claims more
    // positions than the request has tokens (damaged: no position past them was ever written).
    return false;
  }
  const int32_t n_blocks = (committed + bs - 1) / bs;
  if (n_blocks > t.n_blocks || n_blocks > resident_.segment.header().geometry.max_blocks) return false;
  AdoptCandidate c;
  c.slot = index;
  // The last known token is never trusted to the cache: it must be computed for logits.
  c.kv.length = std::min(committed, n_tokens - 1);
  for (int32_t i = 0; i < n_blocks; ++i) {
    const int32_t b = t.blocks()[i];
    if (!cache_.blocks().hold(b)) {
      kv_sequence_release(cache_, c.kv);
      return false;
    }
    c.kv.blocks.push_back(b);
  }
  c.committed = committed;
  c.check_pos = pos;
  c.check_token = kv_check_token(check);
  c.check_logit = t.check_logit;
  c.request = std::move(r);
  pending_.push_back(std::move(c));
  return true;
}

// Recomputes each candidate's check row from the adopted cache, a batch at a time, and
// enters it: with its blocks when the row matches, else to be computed again.
Status KvAdoption::adopt(ModelRunner& runner, const VerifyBatch& batch, BrokerHeader& stats, const Enter& enter) {
  std::vector<AdoptCandidate> pending = std::move(pending_);
  pending_.clear();
  const size_t claimed = reject_double_claims(pending);
  std::vector<uint8_t> ok(pending.size(), 0);
  const Status verified = verify(runner, batch, pending, ok);
  if (!verified.is_ok()) {
    HEARTH_LOG_WARN("could not check the adopted KV cache ({}); the requests not yet checked are computed again",
                    verified.message());
  }
  const int32_t bs = cache_.config().block_size;
  uint64_t adopted = 0, rejected = claimed, positions = 0;
  std::vector<int32_t> rewritten;  // blocks the adopted sequences will write again
  for (size_t i = 0; i < pending.size(); ++i) {
    AdoptCandidate& c = pending[i];
    if (c.kv.blocks.empty()) {  // refused by reject_double_claims
      enter(c.slot, std::move(c.request), {});
      continue;
    }
    if (ok[i]) {
      ++adopted;
      positions += static_cast<uint64_t>(c.kv.length);
      for (size_t b = static_cast<size_t>(c.kv.length / bs); b < c.kv.blocks.size(); ++b) {
        rewritten.push_back(c.kv.blocks[b]);
      }
    } else {
      if (verified.is_ok()) {
        ++rejected;
        HEARTH_LOG_WARN("slot {}: the adopted KV cache does not reproduce position {} (token {}, logit {:.4f}); "
                        "computing its {} tokens again",
                        c.slot, c.check_pos, c.check_token, c.check_logit, c.request.tokens.size());
      }
      resident_.void_table(c.slot);  // before its blocks can go to anyone
      kv_sequence_release(cache_, c.kv);
    }
    enter(c.slot, std::move(c.request), std::move(c.kv));
  }
  stats.stat_kv_adopted.fetch_add(adopted, std::memory_order_relaxed);
  stats.stat_kv_adopt_rejected.fetch_add(rejected, std::memory_order_relaxed);
  // The prefix cache's index comes back only from a cache that passed every check (one
  // that failed may be damaged anywhere), and without the blocks adopted sequences are
  // about to write again: nobody may find a block while it is written.
  int32_t restored = 0;
  if (rejected == 0 && verified.is_ok()) {
    for (int32_t b : rewritten) resident_.segment.record(b).published.store(0, std::memory_order_release);
    restored = resident_.restore_index(cache_.blocks());
  } else {
    resident_.segment.clear_records();
  }
  if (Status audit = cache_.blocks().audit(); !audit.is_ok()) {
    // The next engine must not adopt what this one could not account for.
    resident_.segment.clear_tables();
    resident_.segment.clear_records();
    return make_error(ErrorCode::kInternal, "the KV blocks after adoption fail their audit: {}", audit.message());
  }
  if (!pending.empty() || restored > 0) {
    HEARTH_LOG_INFO("adopted the KV cache of {} resumed requests ({} positions not computed again); {} failed the "
                    "check and are computed again; {} prefix-cache blocks found again",
                    adopted, positions, rejected, restored);
  }
  return Status::ok();
}

// Recomputes each candidate's check row from the adopted cache, a batch at a time, and
// marks those that match in `ok`. An error leaves the rest unmarked.
Status KvAdoption::verify(ModelRunner& runner, const VerifyBatch& batch, const std::vector<AdoptCandidate>& pending,
                          std::vector<uint8_t>& ok) {
  const auto vocab = static_cast<size_t>(batch.vocab_size);
  const auto rows_per_step = static_cast<size_t>(std::max(1, batch.rows));
  ModelInput input;
  std::vector<size_t> rows;
  for (size_t first = 0; first < pending.size(); first += rows_per_step) {
    input.clear(cache_.config().block_size);
    rows.clear();
    for (size_t i = first; i < std::min(pending.size(), first + rows_per_step); ++i) {
      const AdoptCandidate& c = pending[i];
      if (c.kv.blocks.empty()) continue;
      HEARTH_RETURN_IF_ERROR(input.add_sequence(
          std::span(c.request.tokens).subspan(static_cast<size_t>(c.check_pos), 1), c.check_pos, c.kv.blocks, true,
          c.request.spec.adapter));
      rows.push_back(i);
    }
    if (rows.empty()) continue;
    HEARTH_ASSIGN_OR_RETURN(std::span<const float> logits, runner.run(input));
    for (size_t k = 0; k < rows.size(); ++k) {
      const AdoptCandidate& c = pending[rows[k]];
      ok[rows[k]] = check_matches(logits.subspan(k * vocab, vocab), c.check_token, c.check_logit) ? 1 : 0;
    }
  }
  return Status::ok();
}

// With tensor parallelism the tables describe every rank's blocks: they may be adopted
// only if each rank's share of the cache is the one they were written with (a rank
// that rebuilt its segment, or keeps a private cache, did not keep it). Otherwise they
// are voided and the requests in flight computed again. Runs once the group has formed
// (every rank has said which segment it holds), before anything is adopted.
void KvAdoption::reconcile_ranks(const TpSegment& tp, uint32_t n_slots) {
  const int tp_size = tp.tp_size();
  if (tp_size == 1) return;
  KvHeader& h = resident_.segment.header();
  std::array<uint64_t, kMaxTensorParallel> ids{};
  std::string changed;
  for (int r = 1; r < tp_size; ++r) {
    ids[static_cast<size_t>(r)] = tp.rank(r).kv_id.load(std::memory_order_relaxed);
    if (ids[static_cast<size_t>(r)] == 0 || ids[static_cast<size_t>(r)] != h.rank_ids[r].load(std::memory_order_relaxed)) {
      changed += fmt::format("{}{}", changed.empty() ? "" : ", ", r);
    }
  }
  if (changed.empty()) return;
  uint32_t live = 0;
  for (uint32_t i = 0; i < n_slots; ++i) {
    live += resident_.segment.table(i).committed.load(std::memory_order_acquire) > 0 ? 1 : 0;
  }
  // Voided before the new ids are recorded (release stores, after the tables' and
  // records' own): an engine killed in between must not find the old tables under ids
  // that match.
  resident_.segment.clear_tables();
  resident_.segment.clear_records();
  for (int r = 1; r < tp_size; ++r) h.rank_ids[r].store(ids[static_cast<size_t>(r)], std::memory_order_release);
  if (live > 0) {
    HEARTH_LOG_WARN("rank(s) {} hold another KV cache than the one the tables describe (rebuilt or private): "
                    "{} requests in flight are computed again",
                    changed, live);
  }
}

// A block two tables hold must be one the prefix cache shared: a full block at the same
// place in both, after the same tokens. Anything else (a table that outlived the
// release of its blocks) would let two sequences write one block: both candidates lose
// their blocks and are computed again; returns how many.
size_t KvAdoption::reject_double_claims(std::vector<AdoptCandidate>& pending) {
  const int32_t bs = cache_.config().block_size;
  std::unordered_map<int32_t, std::pair<size_t, size_t>> first_claim;  // block -> (candidate, index)
  std::vector<uint8_t> bad(pending.size(), 0);
  for (size_t c = 0; c < pending.size(); ++c) {
    const AdoptCandidate& a = pending[c];
    for (size_t i = 0; i < a.kv.blocks.size(); ++i) {
      const auto [it, fresh] = first_claim.emplace(a.kv.blocks[i], std::pair{c, i});
      if (fresh) continue;
      const AdoptCandidate& b = pending[it->second.first];
      const auto end = static_cast<int32_t>(i + 1) * bs;
      const bool shared = it->second.second == i && a.committed >= end && b.committed >= end &&
                          std::equal(a.request.tokens.begin(), a.request.tokens.begin() + end, b.request.tokens.begin());
      if (shared) continue;
      HEARTH_LOG_ERROR("KV block {} is claimed by the tables of slots {} and {} for different content: both are "
                       "computed again",
                       a.kv.blocks[i], a.slot, b.slot);
      bad[c] = bad[it->second.first] = 1;
    }
  }
  size_t n = 0;
  for (size_t c = 0; c < pending.size(); ++c) {
    if (!bad[c]) continue;
    resident_.void_table(pending[c].slot);
    kv_sequence_release(cache_, pending[c].kv);
    ++n;
  }
  return n;
}

}  // namespace hearth
