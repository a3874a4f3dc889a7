// RequestSpec: what a request asks of the engine besides its prompt. One struct from the
// frontend's admission, through the broker slot, to the engine's driver: every hop embeds
// it whole instead of re-declaring its fields. One set of limits, one validate: the
// frontend runs it on admission (after the parse named the JSON fields) and the engine
// once more where it takes a request from another process, with the same error codes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/pooling.h"
#include "common/sampling_params.h"
#include "common/status.h"

namespace hearth {

// Stop ids a request may carry, the model's own included (what a broker slot stores).
inline constexpr int32_t kMaxStopIds = 32;

struct RequestSpec {
  SamplingParams sampling;            // its seed is the request's seed (choice i of n draws with seed + i)
  int32_t max_tokens = 0;             // tokens to produce at most
  int32_t min_tokens = 0;             // stop ids are not sampled before this many tokens
  int32_t top_logprobs = 0;           // alternatives reported per token, 0..kMaxTopLogprobs
  bool ignore_stop = false;           // benchmarks: run to max_tokens whatever is sampled
  std::vector<int32_t> stop_ids;      // tokens that end the output (the model's own among them)
  std::vector<LogitBias> logit_bias;  // added to the logits before sampling
  std::string grammar;                // GBNF text the output must match; empty: unconstrained
  // An embedding: no output; the prompt's final hidden states pooled into one vector
  // (common/pooling.h). kNone: the request generates.
  Pooling pooling = Pooling::kNone;
  // A thinking budget: tokens the output may spend inside its reasoning (after a first
  // token reasoning_start, or from its start when reasoning_open: the prompt opened it)
  // before reasoning_end is put in as its next token, so that the answer follows;
  // -1: no budget. Not applied to output a grammar constrains.
  int32_t reasoning_budget = -1;
  int32_t reasoning_start = -1;  // -1: only an opened reasoning counts
  int32_t reasoning_end = -1;
  bool reasoning_open = false;
  // A resident LoRA adapter (ipc/lora_segment.h): its slot in the instance's adapter
  // segment and the id that slot's load was given, so that an adapter unloaded and
  // another loaded into the slot is never taken for it; -1: the base model.
  int32_t adapter = -1;
  uint64_t adapter_id = 0;
};

// What the serving side accepts.
struct RequestLimits {
  int32_t vocab_size = 0;       // token ids are 0..vocab_size-1
  size_t grammar_bytes = 0;     // GBNF text at most (the broker slot's capacity)
};

// The counts and sizes a broker slot can hold (what copying a spec in or out needs):
// kInvalidArgument naming the field otherwise.
Status request_spec_check_shape(const RequestSpec& spec, size_t grammar_bytes);
// The shape, then every value: kOutOfRange for a value outside its range (token ids
// outside the vocabulary, biases, sampling parameters), kInvalidArgument for the rest.
// Messages name the API's fields ("logit_bias: token 9000 is outside the vocabulary").
Status request_spec_validate(const RequestSpec& spec, const RequestLimits& limits);

}  // namespace hearth
