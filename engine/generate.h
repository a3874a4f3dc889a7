// generate(): one sequence from prompt ids to finished output, in this process. The
// building block of `hearth generate` and the reference the serving path is compared
// with. Not thread-safe (uses the model and cache it is given).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/sampler.h"

namespace hearth {

enum class FinishReason : uint8_t { kStop, kLength, kCancelled };
std::string_view finish_reason_name(FinishReason reason);  // "stop", "length", "cancelled"

struct GenerateOptions {
  int32_t max_tokens = 256;         // generated tokens at most
  SamplingParams sampling;
  std::vector<TokenId> stop_ids;    // generation ends after producing one of these
  bool ignore_stop = false;         // benchmarks: run to max_tokens regardless
  int32_t context = 0;              // positions available (0: the model's max_context)
};

struct GenerateResult {
  std::vector<TokenId> tokens;      // generated, including a final stop id
  std::vector<float> logprobs;
  FinishReason finish = FinishReason::kLength;
  int32_t prompt_tokens = 0;
  double prefill_seconds = 0.0;     // prompt evaluation up to the first sampled token
  double decode_seconds = 0.0;      // the rest
};

// Called after each token; returning false cancels generation.
using TokenCallback = std::function<bool(const SampledToken&)>;

// Runs the prompt (in chunks of the model's max batch) and samples up to max_tokens.
// The prompt must be non-empty and leave room for one token in the context; otherwise
// kInvalidArgument / kOutOfRange. The sequence's KV blocks are released at the end.
Result<GenerateResult> generate(LlamaModel& model, KvCache& cache, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenCallback& on_token = {});

}  // namespace hearth
