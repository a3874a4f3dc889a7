#include "engine/core/scheduler.h"

#include <algorithm>
#include <random>

#include "common/check.h"

namespace hearth {

Scheduler::Scheduler(const SchedulerConfig& config, BlockAllocator& blocks, int32_t block_size, TokensOf tokens_of)
    : config_(config), blocks_(blocks), block_size_(block_size), tokens_of_(std::move(tokens_of)) {
  if (!config_.prefix_caching) tokens_of_ = nullptr;
  if (config_.chain_seed) {
    chain_seed_ = *config_.chain_seed;
  } else {
    std::random_device random;
    chain_seed_ = {(uint64_t{random()} << 32) | random(), (uint64_t{random()} << 32) | random()};
  }
}

void Scheduler::take_cached_prefix(uint64_t id, Seq& seq) {
  if (!tokens_of_ || seq.n_computed != 0 || !seq.reuse_prefix) return;
  const std::span<const TokenId> tokens = tokens_of_(id);
  // Never the block of the last known token: it must be computed for its logits.
  const int32_t limit = (seq.n_tokens - 1) / block_size_;
  const auto bs = static_cast<size_t>(block_size_);
  BlockKey parent = seq.seed;
  for (int32_t i = 0; i < limit; ++i) {
    const std::span<const TokenId> block = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    const BlockKey key = block_key(parent, block);
    const std::optional<int32_t> b = blocks_.find(key, block);
    if (!b) break;
    seq.kv.blocks.push_back(*b);
    seq.keys.push_back(key);
    parent = key;
  }
  seq.n_computed = static_cast<int32_t>(seq.kv.blocks.size()) * block_size_;
  seq.kv.length = seq.n_computed;
}

void Scheduler::publish_full_blocks(uint64_t id, Seq& seq) {
  if (!tokens_of_) return;
  const int32_t full = seq.n_computed / block_size_;
  if (static_cast<int32_t>(seq.keys.size()) >= full) return;
  const std::span<const TokenId> tokens = tokens_of_(id);
  const auto bs = static_cast<size_t>(block_size_);
  for (auto i = seq.keys.size(); i < static_cast<size_t>(full); ++i) {
    const std::span<const TokenId> block = tokens.subspan(i * bs, bs);
    const BlockKey key = block_key(seq.keys.empty() ? seq.seed : seq.keys.back(), block);
    blocks_.publish(seq.kv.blocks[i], key, block);
    seq.keys.push_back(key);
  }
}

int32_t Scheduler::cached_tokens(uint64_t id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : std::max(it->second.cached, 0);
}

Status Scheduler::add(uint64_t id, int32_t n_tokens, bool reuse_prefix, uint64_t prefix_salt) {
  if (n_tokens < 1) return make_error(ErrorCode::kInvalidArgument, "a sequence needs at least one token");
  if (seqs_.contains(id)) return make_error(ErrorCode::kInvalidArgument, "sequence {} is already scheduled", id);
  if (n_waiting() >= config_.max_waiting) {
    return make_error(ErrorCode::kResourceExhausted, "{} requests are already waiting", n_waiting());
  }
  Seq seq{n_tokens, 0, {}};
  seq.reuse_prefix = reuse_prefix;
  seq.seed = chain_seed_;
  if (prefix_salt != 0) {
    // -1 is no token: no block of a prompt holds it.
    const TokenId salt[] = {-1, static_cast<TokenId>(prefix_salt >> 32), static_cast<TokenId>(prefix_salt & 0xffffffffu)};
    seq.seed = block_key(chain_seed_, salt);
  }
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  if (config_.static_batch_timeout_ms > 0) arrived_ms_[id] = last_now_ms_;
  return Status::ok();
}

Status Scheduler::add(uint64_t id, int32_t n_tokens, KvSequence& adopted, uint64_t prefix_salt) {
  HEARTH_RETURN_IF_ERROR(add(id, n_tokens, true, prefix_salt));
  const auto needed = static_cast<size_t>((adopted.length + block_size_ - 1) / block_size_);
  if (adopted.length < 1 || adopted.length >= n_tokens || adopted.blocks.size() < needed) return Status::ok();
  Seq& seq = seqs_.at(id);
  seq.kv = std::move(adopted);
  adopted = {};
  seq.n_computed = seq.kv.length;
  seq.cached = 0;  // not a prefix-cache lookup
  // First in line: it holds blocks while it waits, and waiting sequences are never
  // preempted, so one queued behind a newcomer that cannot get blocks would hold them
  // with nothing running to give any back.
  waiting_.pop_back();
  waiting_.push_front(id);
  return Status::ok();
}

bool Scheduler::reserve(Seq& seq, int32_t positions) {
  return kv_sequence_reserve(blocks_, seq.kv, positions, block_size_).is_ok();
}

void Scheduler::release(uint64_t id, Seq& seq) {
  if (journal_ != nullptr && !seq.kv.blocks.empty()) journal_->released(id);
  kv_sequence_release(blocks_, seq.kv);
  seq.keys.clear();
  seq.n_computed = 0;
}

void Scheduler::preempt_last() {
  const uint64_t victim = running_.back();
  running_.pop_back();
  release(victim, seqs_.at(victim));
  waiting_.push_front(victim);
  ++preemptions_;
}

StepPlan Scheduler::plan(int64_t now_ms) {
  StepPlan plan;
  last_now_ms_ = now_ms;
  const int32_t total_blocks = blocks_.total();
  int32_t budget = config_.max_batched_tokens;

  // Running sequences keep going; one that cannot get a block preempts the newest.
  for (size_t i = 0; i < running_.size() && budget > 0 &&
                     static_cast<int32_t>(plan.seqs.size()) < config_.max_batch_size;) {
    const uint64_t id = running_[i];
    Seq& seq = seqs_.at(id);
    const int32_t count = std::min(seq.n_tokens - seq.n_computed, budget);
    if (count <= 0) {  // nothing new to compute (cannot happen after advance; skip safely)
      ++i;
      continue;
    }
    if ((seq.n_computed + count + block_size_ - 1) / block_size_ > total_blocks) {
      // Longer than the whole cache: it can never run.
      plan.unschedulable.push_back(id);
      running_.erase(running_.begin() + static_cast<long>(i));
      release(id, seq);
      continue;
    }
    if (!reserve(seq, seq.n_computed + count)) {
      if (running_.size() - 1 > i) {  // someone newer can give way
        plan.preempted.push_back(running_.back());
        preempt_last();
        continue;  // retry this one
      }
      // It is the newest itself: it waits for blocks to come back.
      plan.preempted.push_back(id);
      preempt_last();
      break;
    }
    plan.seqs.push_back({id, seq.n_computed, count, seq.n_computed + count == seq.n_tokens});
    plan.tokens += count;
    budget -= count;
    ++i;
  }

  // Static batching admits a new batch only when the previous one is over and the batch
  // is full or its oldest member has waited long enough.
  bool admit = true;
  if (config_.static_batch_timeout_ms > 0 && !waiting_.empty()) {
    const auto oldest = arrived_ms_.find(waiting_.front());
    const int64_t waited = oldest == arrived_ms_.end() ? 0 : now_ms - oldest->second;
    admit = running_.empty() && (n_waiting() >= config_.max_batch_size || waited >= config_.static_batch_timeout_ms);
  }
  // Then waiting sequences, first come first served, while budget, batch and blocks allow.
  while (admit && !waiting_.empty() && budget > 0 &&
         static_cast<int32_t>(plan.seqs.size()) < config_.max_batch_size) {
    const uint64_t id = waiting_.front();
    Seq& seq = seqs_.at(id);
    if ((seq.n_tokens + block_size_ - 1) / block_size_ > total_blocks) {
      plan.unschedulable.push_back(id);
      waiting_.pop_front();
      release(id, seq);  // an adopted sequence holds blocks while it waits
      seqs_.erase(id);
      continue;
    }
    take_cached_prefix(id, seq);
    const int32_t count = std::min(seq.n_tokens - seq.n_computed, budget);
    if (!reserve(seq, seq.n_computed + count)) {  // no preemption for newcomers
      release(id, seq);  // the cached blocks it took stay published
      break;
    }
    waiting_.pop_front();
    running_.push_back(id);
    if (seq.cached < 0 && tokens_of_ && seq.reuse_prefix) {  // its first admission, looked up
      seq.cached = seq.n_computed;
      prefix_queries_ += static_cast<uint64_t>(seq.n_tokens);
      prefix_hits_ += static_cast<uint64_t>(seq.n_computed);
    }
    plan.seqs.push_back({id, seq.n_computed, count, seq.n_computed + count == seq.n_tokens});
    plan.tokens += count;
    budget -= count;
  }
  // Sequences reported unschedulable while running are gone from the plan's view too.
  for (uint64_t id : plan.unschedulable) seqs_.erase(id);
  if (draft_of_) add_drafts(plan, budget);
  return plan;
}

void Scheduler::add_drafts(StepPlan& plan, int32_t budget) {
  // Every planned sequence has its tokens and blocks: drafts take only what is left, so
  // they never keep a sequence out of the step or cost anyone their blocks.
  for (PlannedSeq& p : plan.seqs) {
    if (budget < 1) break;
    Seq& seq = seqs_.at(p.id);
    if (p.count != 1 || !p.sample || p.begin + p.count != seq.n_tokens) continue;  // not decoding one token
    const int32_t draft = std::clamp(draft_of_(p.id, budget), 0, budget);
    if (draft == 0 || !reserve(seq, p.begin + p.count + draft)) continue;
    p.count += draft;
    p.draft = draft;
    plan.tokens += draft;
    budget -= draft;
  }
}

void Scheduler::advance(const PlannedSeq& planned, int32_t kept) {
  const auto it = seqs_.find(planned.id);
  HEARTH_CHECK(it != seqs_.end()) << "advance of unknown sequence " << planned.id;
  Seq& seq = it->second;
  HEARTH_CHECK(planned.begin == seq.n_computed) << "sequence " << planned.id << " advanced out of order";
  HEARTH_CHECK(kept >= 0 && kept <= planned.draft) << "sequence " << planned.id << " kept " << kept << " of "
                                                   << planned.draft << " drafted tokens";
  seq.n_computed += planned.count - planned.draft + kept;
  seq.kv.length = seq.n_computed;
  if (planned.draft > kept) kv_sequence_trim(blocks_, seq.kv, block_size_);  // blocks of rejected drafts only
  publish_full_blocks(planned.id, seq);
  if (planned.sample) seq.n_tokens += 1 + kept;
}

void Scheduler::append(uint64_t id, int32_t n) {
  const auto it = seqs_.find(id);
  HEARTH_CHECK(it != seqs_.end() && n >= 0) << "append to unknown sequence " << id;
  it->second.n_tokens += n;
}

void Scheduler::remove(uint64_t id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  release(id, it->second);
  seqs_.erase(it);
  arrived_ms_.erase(id);
  running_.erase(std::remove(running_.begin(), running_.end(), id), running_.end());
  waiting_.erase(std::remove(waiting_.begin(), waiting_.end(), id), waiting_.end());
}

const KvSequence* Scheduler::kv(uint64_t id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : &it->second.kv;
}

}  // namespace hearth
