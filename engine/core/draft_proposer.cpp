#include "engine/core/draft_proposer.h"

#include <algorithm>

#include "common/process.h"

namespace hearth {
namespace {

constexpr double kCostDecay = 0.9;  // per draft: the last ~10 drafts make the cost

}  // namespace

Status draft_model_check(const ModelConfig& target, const ModelConfig& draft, int32_t context) {
  if (draft.vocab_size != target.vocab_size) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the draft model's vocabulary has {} tokens and the target's {}: a draft model must share the "
                      "target's tokenizer",
                      draft.vocab_size, target.vocab_size);
  }
  if (draft.max_context < context) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the draft model's context is {} positions, shorter than the {} it would draft in: lower --ctx "
                      "or use a draft model of a longer context",
                      draft.max_context, context);
  }
  return Status::ok();
}

DraftProposer::DraftProposer(ModelRunner& runner, int32_t catch_up_per_step)
    : runner_(runner), catch_up_per_step_(std::max(catch_up_per_step, 1)), catch_up_left_(catch_up_per_step_) {}

DraftProposer::~DraftProposer() {
  for (auto& [id, s] : seqs_) kv_sequence_release(runner_.cache(), s.kv);
}

std::span<const TokenId> DraftProposer::holds(uint64_t id) const {
  const auto it = seqs_.find(id);
  return it == seqs_.end() ? std::span<const TokenId>() : std::span<const TokenId>(it->second.ran);
}

void DraftProposer::forget(uint64_t id) {
  const auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  kv_sequence_release(runner_.cache(), it->second.kv);
  seqs_.erase(it);
}

void DraftProposer::begin_step() {
  ++step_;
  catch_up_left_ = catch_up_per_step_;
}

bool DraftProposer::reserve(uint64_t id, Seq& s, int32_t positions) {
  while (!kv_sequence_reserve(runner_.cache(), s.kv, positions).is_ok()) {
    auto victim = seqs_.end();
    for (auto it = seqs_.begin(); it != seqs_.end(); ++it) {
      if (it->first != id && it->second.used < step_ && (victim == seqs_.end() || it->second.used < victim->second.used)) {
        victim = it;
      }
    }
    if (victim == seqs_.end()) return false;
    kv_sequence_release(runner_.cache(), victim->second.kv);
    seqs_.erase(victim);
  }
  return true;
}

Status DraftProposer::run(Seq& s, std::span<const TokenId> tokens, int32_t begin, std::vector<TokenId>* out) {
  const int32_t chunk = std::max(runner_.max_batch_tokens(), 1);
  const auto vocab = static_cast<size_t>(runner_.vocab_size());
  for (size_t at = 0; at < tokens.size();) {
    const size_t n = std::min(tokens.size() - at, static_cast<size_t>(chunk));
    const bool logits = out != nullptr && at + n == tokens.size();
    input_.clear(runner_.cache().config().block_size);
    HEARTH_RETURN_IF_ERROR(input_.add_sequence(tokens.subspan(at, n), begin + static_cast<int32_t>(at), s.kv.blocks,
                                               logits ? 1 : 0));
    HEARTH_ASSIGN_OR_RETURN(std::span<const float> row, runner_.run(input_));
    s.ran.insert(s.ran.end(), tokens.begin() + static_cast<ptrdiff_t>(at), tokens.begin() + static_cast<ptrdiff_t>(at + n));
    s.kv.length = static_cast<int32_t>(s.ran.size());
    tokens_run_ += n;
    at += n;
    if (logits) {
      out->push_back(static_cast<TokenId>(std::max_element(row.begin(), row.begin() + static_cast<ptrdiff_t>(vocab)) -
                                          row.begin()));
    }
  }
  return Status::ok();
}

Status DraftProposer::propose(uint64_t id, std::span<const TokenId> tokens, int32_t k, std::vector<TokenId>& out) {
  out.clear();
  const auto n = static_cast<int32_t>(tokens.size());
  if (k < 1 || n < 1) return Status::ok();
  Seq& s = seqs_[id];
  s.used = step_;
  // What the draft model holds is valid up to the first position where its tokens and
  // the sequence's part (a rejected draft); the last token always runs again, for the
  // logits after it.
  const auto valid = std::min<int32_t>(static_cast<int32_t>(s.ran.size()), n);
  int32_t same = std::min(s.confirmed, valid);
  while (same < valid && s.ran[static_cast<size_t>(same)] == tokens[static_cast<size_t>(same)]) ++same;
  same = std::min(same, n - 1);
  s.ran.resize(static_cast<size_t>(same));
  s.confirmed = same;
  s.kv.length = same;
  const int32_t block_size = runner_.cache().config().block_size;
  kv_sequence_trim(runner_.cache().blocks(), s.kv, block_size);
  // A long catch-up runs a budget's worth a step, drafting nothing until it is done; the
  // one or two tokens of a decoding sequence always run.
  const int32_t behind = n - same;
  if (behind > 2) {
    if (behind > catch_up_left_) {
      const int32_t m = std::min(catch_up_left_, behind - 1);
      catch_up_left_ = 0;
      if (m < 1 || !reserve(id, s, same + m)) return Status::ok();
      return run(s, tokens.subspan(static_cast<size_t>(same), static_cast<size_t>(m)), same, nullptr);
    }
    catch_up_left_ -= behind;
  }
  // Blocks for the known tokens and the drafts that run after them (the last draft does
  // not run); fewer drafts when the cache is short, none (keeping what it holds) when even
  // the tokens do not fit.
  while (k > 0 && !reserve(id, s, n + k - 1)) --k;
  if (k == 0) return Status::ok();
  // The cost of a drafted token is that of the draft model's decoding steps: a catch-up
  // longer than a few tokens is paid once and not counted.
  uint64_t start = monotonic_ns();
  HEARTH_RETURN_IF_ERROR(run(s, tokens.subspan(static_cast<size_t>(same)), same, &out));
  int32_t timed = 1;
  if (behind > 2) {
    start = monotonic_ns();
    timed = 0;
  }
  while (static_cast<int32_t>(out.size()) < k) {
    const TokenId last = out.back();
    HEARTH_RETURN_IF_ERROR(run(s, std::span(&last, 1), n + static_cast<int32_t>(out.size()) - 1, &out));
    ++timed;
  }
  if (timed > 0) {
    const double per_token = static_cast<double>(monotonic_ns() - start) / timed;
    token_ns_ = token_ns_ == 0.0 ? per_token : token_ns_ * kCostDecay + per_token * (1.0 - kCostDecay);
  }
  return Status::ok();
}

}  // namespace hearth
