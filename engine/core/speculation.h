// Speculative decoding: what proposes draft tokens, and how many a sequence drafts.
//
// A decoding sequence may run its last known token plus up to k drafted tokens in one
// step; the driver samples each of those rows in order, exactly as plain decoding would
// sample it (same penalties, bias, grammar mask, seed draw), and keeps the drafts while
// the sampled token equals the draft. Every proposer here is deterministic (its draft is
// a point mass q), so the standard rejection rule (accept with min(1, p/q), else draw
// from the residual (p - q)+) is exactly "draw from p, accept when it is the draft": the
// output distribution is plain decoding's, and with a seed the tokens are too.
//
// Whether to draft at all is a cost question. A step costs about `fixed + per_token *
// tokens` (StepCost fits both from the steps it sees): while the fixed part (reading
// the weights) dominates, drafted tokens are nearly free; in a large batch or a
// compute-bound step they are not. A drafted token at depth i is accepted with
// probability about accept^i (SpecState), and pays for itself when that beats its
// share of the step's cost (spec_threshold).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/token.h"

namespace hearth {

enum class SpecMethod : uint8_t {
  kNone = 0,
  kNgram = 1,  // prompt lookup: what followed the latest earlier occurrence of the last n tokens
  kDraft = 2,  // a smaller model of the same vocabulary, greedily (engine/core/draft_proposer.h)
};

// "none", "ngram", "draft".
std::string_view spec_method_name(SpecMethod method);
// The method named `name`; kInvalidArgument naming the choices otherwise.
Result<SpecMethod> spec_method_from_name(std::string_view name);

inline constexpr int32_t kMaxSpecTokens = 16;  // drafted tokens per sequence and step, at most

struct SpecConfig {
  SpecMethod method = SpecMethod::kNone;
  int32_t max_tokens = 4;  // drafted tokens per sequence and step at most (--spec-tokens), 1..kMaxSpecTokens
  // Prompt lookup matches the last ngram_max tokens, else fewer, down to ngram_min.
  int32_t ngram_min = 2;
  int32_t ngram_max = 4;
  // false: every decoding sequence drafts max_tokens whenever the proposer has them,
  // whatever its acceptance and the step's cost (tests of the verifier).
  bool adaptive = true;
};

// kInvalidArgument unless the numbers are in range.
Status spec_config_validate(const SpecConfig& config);

// Prompt lookup: the latest place before the end of `tokens` where their last n tokens
// occurred too (the longest n in ngram_min..ngram_max, the latest place among equals),
// and up to `k` tokens that followed it, into `out` (cleared; empty when nothing
// matched).
void ngram_propose(std::span<const TokenId> tokens, int32_t ngram_min, int32_t ngram_max, int32_t k,
                   std::vector<TokenId>& out);

// Proposes draft tokens for a sequence: prompt lookup, a draft model; EAGLE-style heads
// would be a third behind the same calls.
class Proposer {
 public:
  virtual ~Proposer() = default;
  // Up to `k` tokens likely to follow `tokens` (prompt and output so far) of sequence
  // `id`, into `out` (cleared first). A proposer that keeps state per sequence finds it
  // under `id`; the tokens of a sequence only ever grow. Fails only when the proposer
  // itself does (a draft model's step): the driver then logs it and stops drafting.
  virtual Status propose(uint64_t id, std::span<const TokenId> tokens, int32_t k, std::vector<TokenId>& out) = 0;
  // Sequence `id` is gone: whatever the proposer kept for it goes too.
  virtual void forget(uint64_t /*id*/) {}
  // A step is about to be planned (a proposer may budget its work per step).
  virtual void begin_step() {}
  // What drafting one token costs, in nanoseconds (measured; 0 for free proposers): a
  // drafted token pays for itself only if it also pays for this.
  virtual double token_ns() const { return 0.0; }
  // Whether a draft costs work beyond the step (a model's forward passes): then failed
  // probes back off (spec_draft_length).
  virtual bool costly() const { return false; }
};

class NgramProposer final : public Proposer {
 public:
  explicit NgramProposer(const SpecConfig& config) : min_(config.ngram_min), max_(config.ngram_max) {}
  Status propose(uint64_t /*id*/, std::span<const TokenId> tokens, int32_t k, std::vector<TokenId>& out) override {
    ngram_propose(tokens, min_, max_, k, out);
    return Status::ok();
  }

 private:
  int32_t min_, max_;
};

// How well a sequence's drafts do: the probability that a drafted token is accepted when
// the ones before it were, from its recent steps (older steps count less).
struct SpecState {
  double accepted = 0.0;  // decayed counts of drafted tokens accepted ...
  double rejected = 0.0;  // ... and of those that ended a draft
  int32_t idle_steps = 0;   // decoding steps since it last drafted
  int32_t probe_after = 16;  // ... before it probes with one token (doubling while probes fail)
  bool probing = false;      // its latest draft was a probe
  double accept() const;     // with a prior of one accepted and one rejected token
  // After a step that drafted `drafted` tokens and kept `kept` of them.
  void observe(int32_t drafted, int32_t kept);
};

// A step's cost, fitted: fixed_ns + per_token_ns * tokens.
struct StepFit {
  double fixed_ns = 0.0;
  double per_token_ns = 0.0;
};

// The fitted cost of a step, by least squares over recent steps (exponentially
// weighted), from the tokens each computed and its time.
class StepCost {
 public:
  void observe(int32_t tokens, uint64_t ns);
  // From the latest steps that differed enough in size to tell the two costs apart;
  // none before any did.
  std::optional<StepFit> fit() const { return fit_; }

 private:
  double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;  // decayed sums of 1, n, t, n^2, n*t
  std::optional<StepFit> fit_;
};

// The acceptance probability a drafted token must beat to pay for itself, in steps that
// compute `tokens` tokens and produce `produced` of them: a step yields produced tokens in
// fixed + per_token * tokens, and one more drafted token costs per_token (and `draft_ns`,
// what the proposer spends on it) for the chance of one more token, which raises the
// yield per second when that chance is above produced * (per_token + draft_ns) / (fixed +
// per_token * tokens). Without a fit yet, 0.1 (0.25 for a proposer that costs something).
double spec_threshold(std::optional<StepFit> fit, int32_t produced, int32_t tokens, double draft_ns = 0.0);

// Tokens a sequence drafts this step: depth i while accept^i beats `threshold`, up to
// `max_tokens`. A sequence that drafted nothing for 16 decoding steps probes with one
// token, so a changed text can win speculation back. With `back_off` (a costly
// proposer: a draft model's probe pays a catch-up of the tokens since its last one),
// each probe that fails doubles the wait for the next, up to 256 steps, and one that
// succeeds brings it back to 16.
int32_t spec_draft_length(SpecState& state, int32_t max_tokens, double threshold, bool back_off = false);

}  // namespace hearth
