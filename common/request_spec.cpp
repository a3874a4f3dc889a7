#include "common/request_spec.h"

#include "common/lora.h"

namespace hearth {

Status request_spec_check_shape(const RequestSpec& s, size_t grammar_bytes) {
  if (s.stop_ids.size() > static_cast<size_t>(kMaxStopIds)) {
    return make_error(ErrorCode::kInvalidArgument, "stop_token_ids: with the model's own, {} stop ids; at most {} are supported",
                      s.stop_ids.size(), kMaxStopIds);
  }
  if (s.logit_bias.size() > static_cast<size_t>(kMaxLogitBias)) {
    return make_error(ErrorCode::kInvalidArgument, "logit_bias has {} entries; at most {} are accepted",
                      s.logit_bias.size(), kMaxLogitBias);
  }
  if (s.grammar.size() > grammar_bytes) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the request's constraint compiles to a grammar of {} bytes; this server takes at most {} "
                      "(hearth-engine --max-grammar-bytes)",
                      s.grammar.size(), grammar_bytes);
  }
  if (s.adapter < -1 || s.adapter >= kMaxLoraSlots || (s.adapter >= 0) != (s.adapter_id != 0)) {
    return make_error(ErrorCode::kInvalidArgument, "the request names adapter slot {} (id {:x}); slots are 0..{}",
                      s.adapter, s.adapter_id, kMaxLoraSlots - 1);
  }
  return Status::ok();
}

Status request_spec_validate(const RequestSpec& s, const RequestLimits& limits) {
  HEARTH_RETURN_IF_ERROR(request_spec_check_shape(s, limits.grammar_bytes));
  HEARTH_RETURN_IF_ERROR(sampling_params_validate(s.sampling));
  if (s.max_tokens < 0) return make_error(ErrorCode::kOutOfRange, "max_tokens must be at least 0, not {}", s.max_tokens);
  if (s.min_tokens < 0) return make_error(ErrorCode::kOutOfRange, "min_tokens must be at least 0, not {}", s.min_tokens);
  if (s.top_logprobs < 0 || s.top_logprobs > kMaxTopLogprobs) {
    return make_error(ErrorCode::kOutOfRange, "logprobs must be between 0 and {}, not {}", kMaxTopLogprobs,
                      s.top_logprobs);
  }
  const int32_t last = limits.vocab_size - 1;
  for (const int32_t id : s.stop_ids) {
    if (id < 0 || id > last) {
      return make_error(ErrorCode::kOutOfRange, "stop_token_ids: token {} is outside the vocabulary (0..{})", id, last);
    }
  }
  for (const LogitBias& b : s.logit_bias) {
    if (b.id < 0 || b.id > last) {
      return make_error(ErrorCode::kOutOfRange, "logit_bias: token {} is outside the vocabulary (0..{})", b.id, last);
    }
    if (!kLogitBiasRange.contains(b.bias)) {
      return make_error(ErrorCode::kOutOfRange, "logit_bias of token {} must be between -100 and 100, not {}", b.id,
                        b.bias);
    }
  }
  if (s.reasoning_budget < -1) {
    return make_error(ErrorCode::kOutOfRange, "the thinking budget must be at least 0, not {}", s.reasoning_budget);
  }
  if (s.reasoning_budget >= 0 && (s.reasoning_end < 0 || s.reasoning_end > last || s.reasoning_start < -1 ||
                                  s.reasoning_start > last)) {
    return make_error(ErrorCode::kOutOfRange, "a thinking budget needs the reasoning's tags as tokens in the vocabulary");
  }
  if (static_cast<uint8_t>(s.pooling) > static_cast<uint8_t>(Pooling::kFirst)) {
    return make_error(ErrorCode::kInvalidArgument, "pooling {} is not a pooling", static_cast<int>(s.pooling));
  }
  if (s.pooling != Pooling::kNone && (!s.grammar.empty() || !s.logit_bias.empty() || s.top_logprobs > 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "an embedding request produces no tokens: it takes no grammar, logit_bias or logprobs");
  }
  return Status::ok();
}

}  // namespace hearth
