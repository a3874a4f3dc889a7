// Building API responses: bodies, stream chunks, usage, logprobs, errors.
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "common/utf8.h"
#include "frontend/openai.h"
#include "frontend/request_json.h"

namespace hearth {
namespace {

namespace json = boost::json;

// What a logprob that is not a finite number is reported as (JSON has no -Infinity).
constexpr double kLogprobFloor = -9999.0;

// The double that prints as the float's shortest decimal form (-0.1, not
// -0.10000000149011612); non-finite logprobs become kLogprobFloor.
double logprob_value(float lp) {
  if (!std::isfinite(lp)) return kLogprobFloor;
  const std::string s = fmt::format("{}", lp);
  double d = static_cast<double>(lp);
  std::from_chars(s.data(), s.data() + s.size(), d);
  return d;
}

std::string_view endpoint_object(const ApiRequest& request, bool chunk) {
  if (request.endpoint == ApiEndpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

json::string jstr(std::string_view s) { return json::string(s.data(), s.size()); }

json::value finish_value(std::string_view finish_reason) {
  if (finish_reason.empty()) return nullptr;
  return jstr(finish_reason);
}

// The bytes a token adds to the text.
std::string_view bytes_of(const std::vector<uint8_t>& bytes, const std::string& token) {
  if (bytes.empty()) return token;
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

json::array bytes_array(std::string_view bytes) {
  json::array out;
  out.reserve(bytes.size());
  for (const char c : bytes) out.emplace_back(static_cast<int64_t>(static_cast<unsigned char>(c)));
  return out;
}

// The alternatives reported for one token: at most `limit` of them.
size_t top_count(const ApiTokenLogprob& t, int32_t limit) {
  return std::min(t.top.size(), static_cast<size_t>(std::max(limit, 0)));
}

// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
// Each top_logprobs entry holds the alternatives and, as OpenAI does, the sampled token.
json::object completion_logprobs(const std::vector<ApiTokenLogprob>& logprobs, int32_t limit, int64_t offset) {
  json::array tokens, token_logprobs, top_logprobs, text_offset;
  for (const ApiTokenLogprob& t : logprobs) {
    tokens.emplace_back(jstr(t.token));
    token_logprobs.emplace_back(logprob_value(t.logprob));
    json::object top;
    const size_t count = top_count(t, limit);
    for (size_t i = 0; i < count; ++i) {
      const auto& [text, lp] = t.top[i];
      const json::string_view key(text.data(), text.size());
      if (!top.contains(key)) top.emplace(key, logprob_value(lp));  // the likelier of two equal texts
    }
    const json::string_view sampled(t.token.data(), t.token.size());
    if (!top.contains(sampled)) top.emplace(sampled, logprob_value(t.logprob));
    top_logprobs.emplace_back(std::move(top));
    text_offset.emplace_back(offset);
    offset += static_cast<int64_t>(bytes_of(t.bytes, t.token).size());
  }
  return json::object{{"tokens", std::move(tokens)},
                      {"token_logprobs", std::move(token_logprobs)},
                      {"top_logprobs", std::move(top_logprobs)},
                      {"text_offset", std::move(text_offset)}};
}

// Chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
json::object chat_logprobs(const std::vector<ApiTokenLogprob>& logprobs, int32_t limit) {
  json::array content;
  content.reserve(logprobs.size());
  for (const ApiTokenLogprob& t : logprobs) {
    json::array top;
    const size_t count = top_count(t, limit);
    for (size_t i = 0; i < count; ++i) {
      const auto& [text, lp] = t.top[i];
      const std::vector<uint8_t> none;
      const std::vector<uint8_t>& given = i < t.top_bytes.size() ? t.top_bytes[i] : none;
      top.emplace_back(json::object{
          {"token", jstr(text)}, {"logprob", logprob_value(lp)}, {"bytes", bytes_array(bytes_of(given, text))}});
    }
    content.emplace_back(json::object{{"token", jstr(t.token)},
                                      {"logprob", logprob_value(t.logprob)},
                                      {"bytes", bytes_array(bytes_of(t.bytes, t.token))},
                                      {"top_logprobs", std::move(top)}});
  }
  return json::object{{"content", std::move(content)}};
}

json::value logprobs_value(const ApiRequest& request, const std::vector<ApiTokenLogprob>& logprobs,
                           int64_t text_offset_base) {
  if (request.logprobs < 0) return nullptr;
  if (request.endpoint == ApiEndpoint::kCompletions) {
    return completion_logprobs(logprobs, request.logprobs, text_offset_base);
  }
  return chat_logprobs(logprobs, request.logprobs);
}

json::object usage_object(const ApiUsage& usage) {
  return json::object{{"prompt_tokens", usage.prompt_tokens},
                      {"completion_tokens", usage.completion_tokens},
                      {"total_tokens", static_cast<int64_t>(usage.prompt_tokens) + usage.completion_tokens},
                      {"prompt_tokens_details", json::object{{"cached_tokens", usage.cached_tokens}}},
                      {"completion_tokens_details", json::object{{"reasoning_tokens", usage.reasoning_tokens}}}};
}

json::object envelope(const ApiRequest& request, const ApiResponseHead& head, bool chunk) {
  json::object o{{"id", jstr(head.id)},
                 {"object", jstr(endpoint_object(request, chunk))},
                 {"created", head.created},
                 {"model", jstr(head.model)}};
  if (!head.system_fingerprint.empty()) o["system_fingerprint"] = jstr(head.system_fingerprint);
  return o;
}

json::array tool_calls_array(const std::vector<ApiToolCall>& calls, int32_t first, bool indexed) {
  json::array out;
  for (size_t i = 0; i < calls.size(); ++i) {
    json::object c{{"id", jstr(calls[i].id)},
                   {"type", "function"},
                   {"function", json::object{{"name", jstr(calls[i].name)}, {"arguments", jstr(calls[i].arguments)}}}};
    if (indexed) c["index"] = first + static_cast<int32_t>(i);
    out.push_back(std::move(c));
  }
  return out;
}

std::string sse_event(const json::value& v) { return "data: " + json::serialize(v) + "\n\n"; }

}  // namespace

int api_status_of(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kOk:
      return 200;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kFormat:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kUnsupported:
      return 400;
    case ErrorCode::kNotFound:
      return 404;
    case ErrorCode::kResourceExhausted:
      return 429;
    case ErrorCode::kUnavailable:
      return 503;
    case ErrorCode::kIo:
    case ErrorCode::kInternal:
    case ErrorCode::kShmTooSmall:
      return 500;
  }
  return 500;  // a code added later and not mapped here
}

// Types and codes as OpenAI reports them: request errors (400, 404) are
// "invalid_request_error", with code "unsupported_value" for well-formed requests hearth
// cannot serve and "model_not_found" for a 404 about the model; 429 is
// "rate_limit_error" / "rate_limit_exceeded"; 500 and 503 are "server_error".
std::string api_error_body(const Status& status) {
  const int http = api_status_of(status);
  const std::string_view param = request_json::error_param(status.message());
  std::string_view type = "server_error";
  json::value code = nullptr;
  switch (http) {
    case 400:
      type = "invalid_request_error";
      if (status.code() == ErrorCode::kUnsupported) code = "unsupported_value";
      break;
    case 404:
      type = "invalid_request_error";
      code = param.substr(0, param.find_first_of(".[")) == "model" ? "model_not_found" : "not_found";
      break;
    case 429:
      type = "rate_limit_error";
      code = "rate_limit_exceeded";
      break;
    case 503:
      code = "service_unavailable";
      break;
    default:
      code = "internal_error";
      break;
  }
  json::value param_value = nullptr;
  if (!param.empty()) param_value = jstr(param);
  const json::object error{{"message", jstr(utf8_sanitize(status.message()))},
                           {"type", jstr(type)},
                           {"param", std::move(param_value)},
                           {"code", std::move(code)}};
  return json::serialize(json::object{{"error", error}});
}

std::string api_response_body(const ApiRequest& request, const ApiResponseHead& head,
                              const std::vector<ApiChoice>& choices, const ApiUsage& usage) {
  json::object body = envelope(request, head, /*chunk=*/false);
  json::array out;
  out.reserve(choices.size());
  for (const ApiChoice& c : choices) {
    json::object choice{{"index", c.index}};
    if (request.endpoint == ApiEndpoint::kCompletions) {
      choice["text"] = jstr(c.text);
    } else {
      json::object message{{"role", "assistant"}, {"content", jstr(c.text)}};
      if (c.reasoning) message["reasoning_content"] = jstr(*c.reasoning);
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = tool_calls_array(c.tool_calls, 0, false);
      }
      choice["message"] = std::move(message);
    }
    choice["logprobs"] = logprobs_value(request, c.logprobs, c.text_offset_base);
    choice["finish_reason"] = finish_value(c.finish_reason);
    out.emplace_back(std::move(choice));
  }
  body["choices"] = std::move(out);
  body["usage"] = usage_object(usage);
  return json::serialize(body);
}

std::string api_stream_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                             std::string_view delta, std::string_view finish_reason,
                             const std::vector<ApiTokenLogprob>& logprobs, bool role_chunk, int32_t text_offset_base,
                             const ApiUsage* usage) {
  json::object body = envelope(request, head, /*chunk=*/true);
  json::object choice{{"index", index}};
  if (request.endpoint == ApiEndpoint::kCompletions) {
    choice["text"] = jstr(delta);
  } else {
    json::object d;
    if (role_chunk) d["role"] = "assistant";
    if (role_chunk || !delta.empty()) d["content"] = jstr(delta);
    choice["delta"] = std::move(d);
  }
  // A chunk without tokens (the last one of a choice) carries null logprobs, as OpenAI's do.
  choice["logprobs"] = logprobs.empty() ? json::value(nullptr) : logprobs_value(request, logprobs, text_offset_base);
  choice["finish_reason"] = finish_value(finish_reason);
  body["choices"] = json::array{std::move(choice)};
  if (usage != nullptr) {
    body["usage"] = usage_object(*usage);
  } else if (request.include_usage) {
    body["usage"] = nullptr;  // only the usage chunk has it
  }
  return sse_event(body);
}

std::string api_stream_tool_calls_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                                        const std::vector<ApiToolCall>& calls, int32_t first, bool role_chunk) {
  json::object body = envelope(request, head, /*chunk=*/true);
  json::object d;
  if (role_chunk) d["role"] = "assistant";
  d["tool_calls"] = tool_calls_array(calls, first, true);
  body["choices"] = json::array{json::object{{"index", index}, {"delta", std::move(d)}, {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}};
  if (request.include_usage) body["usage"] = nullptr;
  return sse_event(body);
}

std::string api_stream_reasoning_chunk(const ApiRequest& request, const ApiResponseHead& head, int32_t index,
                                       std::string_view delta, bool role_chunk) {
  json::object body = envelope(request, head, /*chunk=*/true);
  json::object d;
  if (role_chunk) d["role"] = "assistant";
  d["reasoning_content"] = jstr(delta);
  body["choices"] = json::array{json::object{{"index", index}, {"delta", std::move(d)}, {"logprobs", nullptr},
                                             {"finish_reason", nullptr}}};
  if (request.include_usage) body["usage"] = nullptr;
  return sse_event(body);
}

std::string api_stream_usage_chunk(const ApiRequest& request, const ApiResponseHead& head, const ApiUsage& usage) {
  json::object body = envelope(request, head, /*chunk=*/true);
  body["choices"] = json::array();
  body["usage"] = usage_object(usage);
  return sse_event(body);
}

std::string api_stream_error(const Status& status) { return "data: " + api_error_body(status) + "\n\n"; }

}  // namespace hearth
