// DraftProposer: speculative decoding's draft model. A smaller model of the target's
// vocabulary (its own weights, its own KV cache) drafts greedily: its argmax after the
// sequence's tokens, then after that token, up to k. A draft is a point mass, so the
// driver's "keep while the sampled token equals the draft" is exactly the rejection rule
// and the output is plain decoding's (engine/core/speculation.h).
//
// Per sequence it keeps the draft model's KV blocks and the tokens they hold. The target's
// tokens only grow, so what the draft model computed stays valid up to the first position
// where its tokens and the sequence's differ (a rejected draft); it catches up from there,
// usually one or two tokens, and drafts. A longer catch-up (a new or resumed sequence's
// prompt, the tokens since a pause) runs in chunks of at most the per-step budget, one
// step's worth at a time, and the sequence drafts once it has caught up: the work a step
// plans never grows by more than the budget. When the cache is short of blocks, the
// draft KV of the sequences that proposed least recently goes first; a sequence that
// still does not fit drafts nothing that step and keeps what it holds.
//
// The draft KV is private to the process: after an engine restart it is computed again
// from the sequence's tokens. Not thread-safe (the step loop's).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model_input.h"
#include "engine/core/model_runner.h"
#include "engine/core/speculation.h"

namespace hearth {

// kInvalidArgument unless a draft model (`draft`) can draft for `target`: the same
// vocabulary size, and a context as long as the sequences it drafts for.
Status draft_model_check(const ModelConfig& target, const ModelConfig& draft, int32_t context);

class DraftProposer final : public Proposer {
 public:
  // Runs the draft model and its cache through `runner` (borrowed; not the target's),
  // catching up at most `catch_up_per_step` tokens a step (at least 1).
  DraftProposer(ModelRunner& runner, int32_t catch_up_per_step);
  ~DraftProposer() override;

  Status propose(uint64_t id, std::span<const TokenId> tokens, int32_t k, std::vector<TokenId>& out) override;
  void forget(uint64_t id) override;
  void begin_step() override;
  double token_ns() const override { return token_ns_; }
  bool costly() const override { return true; }

  // Sequences it keeps draft KV for, the tokens whose K/V the draft cache holds for one
  // (in position order), and the tokens it has run in all (tests).
  size_t sequences() const { return seqs_.size(); }
  std::span<const TokenId> holds(uint64_t id) const;
  uint64_t tokens_run() const { return tokens_run_; }

 private:
  struct Seq {
    KvSequence kv;
    std::vector<TokenId> ran;  // the tokens at the draft KV's positions, in order
    int32_t confirmed = 0;     // of those, how many are known to equal the sequence's
    uint64_t used = 0;         // the step it last proposed in
  };
  // Runs `tokens` at positions from `begin` (they follow what `s` holds); with `out`,
  // appends the draft model's argmax after the last of them.
  Status run(Seq& s, std::span<const TokenId> tokens, int32_t begin, std::vector<TokenId>* out);
  // Blocks for `positions` positions of `s` (sequence `id`), taking them from the
  // sequences that proposed least recently (not this step) where the cache is short.
  bool reserve(uint64_t id, Seq& s, int32_t positions);

  ModelRunner& runner_;
  int32_t catch_up_per_step_;
  int32_t catch_up_left_ = 0;  // of this step's budget
  uint64_t step_ = 1;
  ModelInput input_;
  std::unordered_map<uint64_t, Seq> seqs_;
  double token_ns_ = 0.0;  // what a drafted token cost recently (exponentially weighted)
  uint64_t tokens_run_ = 0;
};

}  // namespace hearth
