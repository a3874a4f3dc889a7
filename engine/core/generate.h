// generate(): one sequence from prompt ids to finished output, in this process, on the
// same Driver and ModelRunner the engine serves with. The building block of `hearth
// generate` and the reference the serving path is compared with. Not thread-safe (uses
// the model and cache it is given).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/finish_reason.h"
#include "common/request_spec.h"
#include "common/sampling_params.h"
#include "common/status.h"
#include "common/token.h"
#include "engine/core/driver.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"

namespace hearth {

struct GenerateOptions {
  // What is asked of the one sequence (common/request_spec.h): max_tokens, sampling, the
  // stop ids generation ends after, ignore_stop (benchmarks: run to max_tokens regardless).
  RequestSpec spec{.max_tokens = 256};
  int32_t context = 0;  // positions available (0: the model's max_context)
  SpecConfig speculative;  // speculative decoding (method kNone: off); the tokens are the same either way
  // With speculative.method kDraft: the draft model and its own KV cache (required).
  Model* draft_model = nullptr;
  KvCache* draft_cache = nullptr;
  int32_t adapter = -1;  // the model's LoRA adapter slot the sequence runs with (Model::set_adapter); -1: none
};

struct GenerateResult {
  std::vector<TokenId> tokens;      // generated, including a final stop id
  std::vector<float> logprobs;      // of each token under the model's distribution
  FinishReason finish = FinishReason::kLength;
  int32_t prompt_tokens = 0;
  double prefill_seconds = 0.0;     // prompt evaluation up to the first sampled token
  double decode_seconds = 0.0;      // the rest
  SpecStats spec;                   // what speculative decoding drafted and kept
};

// Called after each token; returning false cancels generation.
using TokenCallback = std::function<bool(const TokenResult&)>;

// Runs the prompt (in chunks of the model's max batch) and samples up to max_tokens.
// The prompt must be non-empty and leave room for one token in the context; otherwise
// kInvalidArgument / kOutOfRange. The sequence's KV blocks are released at the end.
Result<GenerateResult> generate(Model& model, KvCache& cache, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenCallback& on_token = {});

}  // namespace hearth
