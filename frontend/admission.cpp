#include "frontend/admission.h"

#include <algorithm>

#include "frontend/structured.h"

namespace hearth {

Status admit_model(const ApiRequest& req, const ModelFacts& facts) {
  const auto& names = facts.model_names;
  if (req.model.empty() || std::find(names.begin(), names.end(), req.model) != names.end()) return Status::ok();
  return make_error(ErrorCode::kNotFound, "model: \"{}\" is not served here (this server has \"{}\")", req.model,
                    fmt::join(names, "\", \""));
}

namespace {

// How many tokens the request may produce: its max_tokens, or the default, within the
// room the prompt leaves.
Result<int32_t> output_budget(const ApiRequest& req, size_t prompt_size, const ModelFacts& facts) {
  if (prompt_size == 0) return make_error(ErrorCode::kInvalidArgument, "prompt: the prompt is empty");
  if (prompt_size >= static_cast<size_t>(facts.context)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "prompt: this model's context holds {} tokens; the prompt has {} (it needs room for at least "
                      "one more)",
                      facts.context, prompt_size);
  }
  const int32_t room = facts.context - static_cast<int32_t>(prompt_size);
  int32_t max_tokens = req.max_tokens.value_or(req.endpoint == ApiEndpoint::kCompletions ? 16 : room);
  // Messages' max_tokens and Responses' max_output_tokens are upper bounds clients set
  // high (coding agents ask for tens of thousands): the room left is the bound there, and
  // an answer that fills it ends as one that reached them. OpenAI's chat and completions
  // refuse what cannot fit, as OpenAI and vLLM do.
  if (req.endpoint == ApiEndpoint::kMessages || req.endpoint == ApiEndpoint::kResponses) {
    max_tokens = std::min(max_tokens, room);
  }
  if (max_tokens > room) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{}: {} tokens of output do not fit: the context holds {} and the prompt takes {}",
                      req.endpoint == ApiEndpoint::kResponses ? "max_output_tokens" : "max_tokens", max_tokens,
                      facts.context, prompt_size);
  }
  if (req.min_tokens > max_tokens) {
    return make_error(ErrorCode::kInvalidArgument, "min_tokens ({}) must not exceed max_tokens ({})", req.min_tokens,
                      max_tokens);
  }
  return max_tokens;
}

}  // namespace

Result<Admission> admit(const ApiRequest& req, std::vector<int32_t> prompt, const ModelFacts& facts, uint64_t seed) {
  HEARTH_ASSIGN_OR_RETURN(const int32_t max_tokens, output_budget(req, prompt.size(), facts));
  Admission a;
  RequestSpec& spec = a.submit.spec;
  spec.sampling = req.sampling;
  spec.sampling.seed = req.seed.value_or(seed);
  spec.max_tokens = max_tokens;
  spec.min_tokens = req.min_tokens;
  spec.top_logprobs = std::max(0, req.logprobs);
  spec.ignore_stop = req.ignore_eos;
  spec.stop_ids = facts.stop_ids;
  for (const int32_t id : req.stop_token_ids) {
    if (std::find(spec.stop_ids.begin(), spec.stop_ids.end(), id) == spec.stop_ids.end()) spec.stop_ids.push_back(id);
  }
  spec.logit_bias = req.logit_bias;
  HEARTH_ASSIGN_OR_RETURN(spec.grammar, request_grammar(req, facts.tool_format, facts.single_bytes, facts.grammar_bytes));
  HEARTH_RETURN_IF_ERROR(
      request_spec_validate(spec, {.vocab_size = facts.vocab_size, .grammar_bytes = facts.grammar_bytes}));
  a.samples = req.best_of.value_or(req.n);
  if (static_cast<uint32_t>(a.samples) > facts.n_slots) {
    return make_error(ErrorCode::kInvalidArgument, "{}: {} choices need as many request slots; this server has {}",
                      req.best_of ? "best_of" : "n", a.samples, facts.n_slots);
  }
  a.tool_format = req.tool_choice == ApiToolChoice::kNone ? ToolCallFormat::kNone : facts.tool_format;
  a.submit.prompt = std::move(prompt);
  return a;
}

}  // namespace hearth
