// Sampler: picks the next token from a row of logits, as a request's parameters say.
//
// Order (as vLLM and the OpenAI API define it): repetition penalty (over prompt and
// output), presence and frequency penalties (over the output), temperature, then top-k,
// top-p and min-p filtering, then a draw. Temperature 0 is greedy (argmax, lowest id on
// ties). The random stream is a 64-bit generator seeded per request, so the same seed
// and the same logits give the same tokens on every machine. One Sampler per sequence;
// not thread-safe. Scratch memory is reserved once, so sampling does not allocate.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "common/sampling_params.h"
#include "common/status.h"
#include "common/token.h"

namespace hearth {


struct SampledToken {
  TokenId id = -1;
  float logprob = 0.0f;  // log-probability of `id` under the final (filtered) distribution
};

class Sampler {
 public:
  const SamplingParams& params() const { return params_; }
  // Index of the next draw in the seed's stream (tokens sampled so far).
  uint64_t position() const { return position_; }

  Sampler(const SamplingParams& params, int32_t vocab_size);

  // Samples from `logits` ([vocab_size], modified in place by penalties and temperature).
  // `prompt` and `output` are the sequence's tokens so far (for the penalties).
  SampledToken sample(std::span<float> logits, std::span<const TokenId> prompt, std::span<const TokenId> output);

  // Continues the random stream as if `n` tokens had already been sampled: a sequence
  // recomputed from its tokens after an engine restart gets the draws an uninterrupted
  // run would have made.
  void set_position(uint64_t n) { position_ = n; }

 private:
  double uniform_at(uint64_t n) const;  // the n-th draw in [0, 1) of this seed's stream

  SamplingParams params_;
  int32_t vocab_size_;
  uint64_t position_ = 0;  // tokens sampled so far
  std::vector<int32_t> counts_;        // occurrences of each id in the output
  std::vector<uint8_t> seen_;          // ids in prompt or output (repetition penalty)
  std::vector<int32_t> touched_;       // ids whose counts_/seen_ are set, to reset quickly
  std::vector<std::pair<float, int32_t>> candidates_;
};

// One sampled token as the API reports it: its log-probability and the top alternatives
// under the model's own distribution (the raw logits, before penalties, temperature and
// filters).
struct SampledRow {
  TokenId id = -1;
  float logprob = 0.0f;
  int32_t n_top = 0;
  std::array<TokenId, kMaxTopLogprobs> top_ids{};
  std::array<float, kMaxTopLogprobs> top_logprobs{};
  // The raw row's top token (the lowest id among equals) and its logit: the row's
  // fingerprint a resident KV cache records (RowCheck), whatever was sampled.
  TokenId top_id = -1;
  float top_logit = 0.0f;
};

// A row of logits to sample on a backend (Backend::sample): the sequence's parameters,
// the index of this token's draw, how many alternatives to report and the tokens the
// penalties look at.
struct SampleRow {
  SamplingParams sampling;
  uint64_t draw = 0;
  int32_t top_logprobs = 0;
  std::span<const TokenId> prompt;
  std::span<const TokenId> output;
};

// What a request changes in a row before it is sampled (not in the logprobs it reports,
// which are the model's own): biases added to logits, tokens ruled out (stop ids before
// min_tokens), and the grammar's allowed tokens (a bit per id; empty: all).
struct RowShaping {
  std::span<const LogitBias> bias;
  std::span<const TokenId> banned;
  std::span<const uint64_t> allowed;
  bool empty() const { return bias.empty() && banned.empty() && allowed.empty(); }
};

// Reused memory of sample_row.
struct SampleScratch {
  std::vector<float> row;
  std::vector<std::pair<float, int32_t>> top;
};

// The driver's sampling of one row of raw logits: the log-normaliser and top_logprobs
// alternatives of the raw distribution, then `sampler` on a copy of the row, shaped by
// `shaping` when given.
SampledRow sample_row(Sampler& sampler, std::span<const float> logits, int32_t top_logprobs,
                      std::span<const TokenId> prompt, std::span<const TokenId> output, SampleScratch& scratch,
                      const RowShaping* shaping = nullptr);

}  // namespace hearth
