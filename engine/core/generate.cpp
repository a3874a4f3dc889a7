#include "engine/core/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "engine/core/draft_proposer.h"
#include "engine/core/model_runner.h"

namespace hearth {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<GenerateResult> generate(Model& model, KvCache& cache, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenCallback& on_token) {
  const ModelConfig& c = model.config();
  if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  const int32_t cache_positions = cache.config().n_blocks * cache.config().block_size;
  const int32_t context =
      std::min({options.context > 0 ? options.context : c.max_context, c.max_context, cache_positions});
  if (static_cast<int64_t>(prompt.size()) >= context) {
    return make_error(ErrorCode::kOutOfRange,
                      "the prompt has {} tokens, but the context holds {} (prompt plus at least one generated token)",
                      prompt.size(), context);
  }

  ModelRunner runner(model, cache);
  std::optional<ModelRunner> draft;
  if (options.speculative.method == SpecMethod::kDraft) {
    if (options.draft_model == nullptr || options.draft_cache == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "speculative decoding with a draft model needs the draft model");
    }
    HEARTH_RETURN_IF_ERROR(draft_model_check(c, options.draft_model->config(), context));
    draft.emplace(*options.draft_model, *options.draft_cache);
  }
  DriverConfig config;
  config.scheduler.max_batch_size = 1;
  config.scheduler.max_batched_tokens = model.max_batch_tokens();  // prefill in chunks of the model's batch
  config.max_sequence_tokens = context + 1;  // the last token sampled needs no position
  config.spec = options.speculative;
  config.draft = draft ? &*draft : nullptr;
  Driver driver(runner, config);
  SequenceRequest request{.tokens = {prompt.begin(), prompt.end()},
                          .n_prompt = static_cast<int32_t>(prompt.size()),
                          .spec = options.spec,
                          .adapter = options.adapter};
  GenerateResult result;
  result.prompt_tokens = request.n_prompt;
  HEARTH_ASSIGN_OR_RETURN(result.finish, driver.add(0, std::move(request)));
  if (result.finish != FinishReason::kNone) return result;  // max_tokens 0

  const auto start = std::chrono::steady_clock::now();
  auto decode_start = start;
  Status failed;
  HEARTH_RETURN_IF_ERROR(driver.run_until_idle([&](const StepEvent& e) {
    if (e.finish == FinishReason::kError) {
      failed = e.error;
      return false;
    }
    result.tokens.push_back(e.token.id);
    result.logprobs.push_back(e.token.logprob);
    if (result.tokens.size() == 1) {
      result.prefill_seconds = seconds_since(start);
      decode_start = std::chrono::steady_clock::now();
    }
    result.finish = e.finish;
    if (on_token && !on_token(e.token)) {
      result.finish = FinishReason::kCancelled;
      return false;
    }
    return true;
  }));
  HEARTH_RETURN_IF_ERROR(failed);
  result.spec = driver.spec_stats();
  if (!result.tokens.empty()) result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace hearth
