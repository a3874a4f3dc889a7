// DraftProposer: speculative decoding's draft model. A smaller model of the target's
// vocabulary (its own weights, its own KV cache) drafts greedily: its argmax after the
// sequence's tokens, then after that token, up to k. A draft is a point mass, so the
// driver's "keep while the sampled token equals the draft" is exactly the rejection rule
// and the output is plain decoding's (engine/core/speculation.h).
//
// Per sequence it keeps the draft model's KV blocks and the tokens they hold. The target's
// tokens only grow, so what the draft model computed stays valid up to the first position
// where its tokens and the sequence's differ (a rejected draft); it catches up from there,
// usually one or two tokens, and drafts. A sequence whose draft cannot get blocks drafts
// nothing that step (its draft KV is let go; it starts over next time).
//
// The draft KV is private to the process: after an engine restart it is computed again
// from the sequence's tokens on the first draft. Not thread-safe (the step loop's).
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
  // Runs the draft model and its cache through `runner` (borrowed; not the target's).
  explicit DraftProposer(ModelRunner& runner);
  ~DraftProposer() override;

  Status propose(uint64_t id, std::span<const TokenId> tokens, int32_t k, std::vector<TokenId>& out) override;
  void forget(uint64_t id) override;
  double token_ns() const override { return token_ns_; }

  // Sequences it keeps draft KV for, and the tokens whose K/V the draft cache holds for
  // one, in position order (tests).
  size_t sequences() const { return seqs_.size(); }
  std::span<const TokenId> holds(uint64_t id) const;

 private:
  struct Seq {
    KvSequence kv;
    std::vector<TokenId> ran;  // the tokens at the draft KV's positions, in order
    int32_t confirmed = 0;     // of those, how many are known to equal the sequence's
  };
  // Runs `tokens` at positions from `begin` (they follow what `s` holds) and appends the
  // draft model's argmax after the last of them to `out`.
  Status run(Seq& s, std::span<const TokenId> tokens, int32_t begin, std::vector<TokenId>& out);

  ModelRunner& runner_;
  ModelInput input_;
  std::unordered_map<uint64_t, Seq> seqs_;
  double token_ns_ = 0.0;  // what a drafted token cost recently (exponentially weighted)
};

}  // namespace hearth
