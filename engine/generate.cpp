#include "engine/generate.h"

#include <algorithm>
#include <chrono>

namespace hearth {

std::string_view finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

namespace {

// Releases the sequence's blocks however generate() returns.
class SequenceGuard {
 public:
  SequenceGuard(KvCache& cache, KvSequence& seq) : cache_(cache), seq_(seq) {}
  ~SequenceGuard() { kv_sequence_release(cache_, seq_); }
  SequenceGuard(const SequenceGuard&) = delete;
  SequenceGuard& operator=(const SequenceGuard&) = delete;

 private:
  KvCache& cache_;
  KvSequence& seq_;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Result<GenerateResult> generate(LlamaModel& model, KvCache& cache, std::span<const TokenId> prompt,
                                const GenerateOptions& options, const TokenCallback& on_token) {
  const ModelConfig& c = model.config();
  HEARTH_RETURN_IF_ERROR(sampling_params_validate(options.sampling));
  if (prompt.empty()) return make_error(ErrorCode::kInvalidArgument, "the prompt is empty");
  if (options.max_tokens < 0) return make_error(ErrorCode::kInvalidArgument, "max_tokens must be >= 0");
  const int32_t cache_positions = cache.config().n_blocks * cache.config().block_size;
  const int32_t context =
      std::min({options.context > 0 ? options.context : c.max_context, c.max_context, cache_positions});
  if (static_cast<int64_t>(prompt.size()) >= context) {
    return make_error(ErrorCode::kOutOfRange,
                      "the prompt has {} tokens, but the context holds {} (prompt plus at least one generated token)",
                      prompt.size(), context);
  }
  for (TokenId t : prompt) {
    if (t < 0 || t >= c.vocab_size) {
      return make_error(ErrorCode::kOutOfRange, "prompt token {} is outside the vocabulary", t);
    }
  }

  GenerateResult result;
  result.prompt_tokens = static_cast<int32_t>(prompt.size());
  KvSequence seq;
  SequenceGuard guard(cache, seq);
  HEARTH_RETURN_IF_ERROR(kv_sequence_reserve(cache, seq, static_cast<int32_t>(prompt.size())));

  std::vector<float> logits(static_cast<size_t>(c.vocab_size));
  std::vector<int32_t> positions;
  const auto start = std::chrono::steady_clock::now();
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  for (int32_t begin = 0; begin < n_prompt; begin += model.max_batch_tokens()) {
    const int32_t n = std::min(model.max_batch_tokens(), n_prompt - begin);
    positions.resize(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = begin + i;
    const BatchSequence bs{0, n, &seq};
    const int32_t last = n - 1;
    const bool final_chunk = begin + n == n_prompt;
    ForwardBatch batch{prompt.subspan(static_cast<size_t>(begin), static_cast<size_t>(n)), positions,
                       std::span<const BatchSequence>(&bs, 1),
                       final_chunk ? std::span<const int32_t>(&last, 1) : std::span<const int32_t>()};
    HEARTH_RETURN_IF_ERROR(model.forward(batch, cache, logits.data()));
  }
  seq.length = n_prompt;

  Sampler sampler(options.sampling, c.vocab_size);
  auto decode_start = start;
  while (true) {
    if (static_cast<int32_t>(result.tokens.size()) >= options.max_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    const SampledToken tok = sampler.sample(logits, prompt, result.tokens);
    result.tokens.push_back(tok.id);
    result.logprobs.push_back(tok.logprob);
    if (result.tokens.size() == 1) {
      result.prefill_seconds = seconds_since(start);
      decode_start = std::chrono::steady_clock::now();
    }
    if (on_token && !on_token(tok)) {
      result.finish = FinishReason::kCancelled;
      break;
    }
    if (!options.ignore_stop &&
        std::find(options.stop_ids.begin(), options.stop_ids.end(), tok.id) != options.stop_ids.end()) {
      result.finish = FinishReason::kStop;
      break;
    }
    if (static_cast<int32_t>(result.tokens.size()) >= options.max_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    if (seq.length + 1 > context) {  // no room to run the token just sampled
      result.finish = FinishReason::kLength;
      break;
    }
    HEARTH_RETURN_IF_ERROR(kv_sequence_reserve(cache, seq, seq.length + 1));
    const int32_t pos = seq.length;
    const BatchSequence bs{0, 1, &seq};
    const int32_t row = 0;
    ForwardBatch batch{std::span<const TokenId>(&result.tokens.back(), 1), std::span<const int32_t>(&pos, 1),
                       std::span<const BatchSequence>(&bs, 1), std::span<const int32_t>(&row, 1)};
    HEARTH_RETURN_IF_ERROR(model.forward(batch, cache, logits.data()));
    seq.length += 1;
  }
  if (!result.tokens.empty()) result.decode_seconds = seconds_since(decode_start);
  return result;
}

}  // namespace hearth
