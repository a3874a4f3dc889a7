#include "frontend/openai.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/json.h"
#include "common/utf8.h"

namespace hearth {
namespace {

namespace json = boost::json;

// Request bodies nest a few levels (body > messages > message > content > part); unknown
// fields such as tool schemas may go deeper, but never this deep.
constexpr size_t kMaxRequestDepth = 32;
constexpr size_t kMaxStopStrings = 4;
constexpr int64_t kMaxChoices = 8;
constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
// What a logprob that is not a finite number is reported as (JSON has no -Infinity).
constexpr double kLogprobFloor = -9999.0;

// Where a top-level field of the OpenAI schemas (and of the extensions hearth honours) is
// implemented: a request to another endpoint gets a 400 for it, as for an unknown field.
constexpr uint8_t kCompletionsOnly = 1, kChatOnly = 2, kBoth = 3;
struct ImplementedField {
  std::string_view name;
  uint8_t endpoints;
};
constexpr std::array<ImplementedField, 37> kImplementedFields = {{
    {"model", kBoth}, {"prompt", kCompletionsOnly}, {"messages", kChatOnly}, {"max_tokens", kBoth},
    {"max_completion_tokens", kChatOnly}, {"temperature", kBoth}, {"top_p", kBoth}, {"top_k", kBoth},
    {"min_p", kBoth}, {"presence_penalty", kBoth}, {"frequency_penalty", kBoth}, {"repetition_penalty", kBoth},
    {"seed", kBoth}, {"stop", kBoth}, {"n", kBoth}, {"stream", kBoth}, {"stream_options", kBoth},
    {"echo", kCompletionsOnly}, {"logprobs", kBoth}, {"top_logprobs", kChatOnly}, {"ignore_eos", kBoth},
    {"response_format", kBoth}, {"tools", kChatOnly}, {"tool_choice", kChatOnly}, {"parallel_tool_calls", kChatOnly},
    {"logit_bias", kBoth}, {"suffix", kCompletionsOnly}, {"best_of", kCompletionsOnly}, {"min_tokens", kBoth},
    {"stop_token_ids", kBoth},
    // vLLM's structured-output extensions.
    {"guided_json", kBoth}, {"guided_regex", kBoth}, {"guided_choice", kBoth}, {"guided_grammar", kBoth},
    // Identifiers for the caller's own bookkeeping, which change nothing in the output.
    {"user", kBoth}, {"safety_identifier", kChatOnly}, {"prompt_cache_key", kChatOnly},
}};

// Fields of the OpenAI schemas that hearth does not implement, or implements only for
// the values that ask for nothing it lacks (checked by refuse_unimplemented).
struct UnimplementedField {
  std::string_view name;
  uint8_t endpoints;  // whose schema has it
};
constexpr std::array<UnimplementedField, 11> kUnimplementedFields = {{
    {"functions", kChatOnly}, {"function_call", kChatOnly}, {"store", kChatOnly}, {"metadata", kChatOnly},
    {"service_tier", kChatOnly}, {"modalities", kChatOnly}, {"audio", kChatOnly}, {"prediction", kChatOnly},
    {"reasoning_effort", kChatOnly}, {"verbosity", kChatOnly}, {"web_search_options", kChatOnly},
}};

// A message that begins with one of these (or with "unknown field NAME") names it as `param`.
bool is_request_field(std::string_view name) {
  return std::any_of(kImplementedFields.begin(), kImplementedFields.end(),
                     [&](const ImplementedField& f) { return f.name == name; }) ||
         std::any_of(kUnimplementedFields.begin(), kUnimplementedFields.end(),
                     [&](const UnimplementedField& f) { return f.name == name; });
}

// ---- reading the request ------------------------------------------------------------

std::string_view kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value of unknown kind";
}

// A user-given string for an error message: at most 40 bytes, cut on a character boundary.
std::string short_quote(std::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() <= kMax) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\"", s.substr(0, utf8_complete_prefix(s.substr(0, kMax))));
}

// The field's value, or nullptr when it is absent or null (both mean "not given").
const json::value* field(const json::object& obj, std::string_view key) {
  const auto it = obj.find(json::string_view(key.data(), key.size()));
  if (it == obj.end() || it->value().is_null()) return nullptr;
  return &it->value();
}

Status wrong_type(std::string_view path, std::string_view expected, const json::value& v) {
  return make_error(ErrorCode::kInvalidArgument, "{} must be {}, not {}", path, expected, kind_of(v));
}

// A JSON integer, or a number with no fractional part (4.0), as int64.
Result<int64_t> integer_of(const json::value& v, std::string_view path) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) {
    return make_error(ErrorCode::kOutOfRange, "{} is too large: {}", path, v.as_uint64());
  }
  if (v.is_double()) {
    const double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d)) {
      if (std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
      return make_error(ErrorCode::kOutOfRange, "{} is too large: {}", path, d);
    }
    return make_error(ErrorCode::kInvalidArgument, "{} must be an integer, not {}", path, d);
  }
  return wrong_type(path, "an integer", v);
}

Result<std::optional<int64_t>> opt_integer(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  HEARTH_ASSIGN_OR_RETURN(const int64_t i, integer_of(*v, key));
  return std::optional<int64_t>(i);
}

// An integer field within [lo, hi]; nullopt when not given.
Result<std::optional<int64_t>> opt_integer_in(const json::object& obj, std::string_view key, int64_t lo, int64_t hi) {
  HEARTH_ASSIGN_OR_RETURN(const auto v, opt_integer(obj, key));
  if (v && (*v < lo || *v > hi)) {
    if (hi != kInt32Max) {
      return make_error(ErrorCode::kOutOfRange, "{} must be between {} and {}, not {}", key, lo, hi, *v);
    }
    if (*v < lo) return make_error(ErrorCode::kOutOfRange, "{} must be at least {}, not {}", key, lo, *v);
    return make_error(ErrorCode::kOutOfRange, "{} must be at most {}, not {}", key, hi, *v);
  }
  return v;
}

Result<std::optional<double>> opt_number(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<double>();
  double d = 0.0;
  if (v->is_double()) {
    d = v->as_double();
  } else if (v->is_int64()) {
    d = static_cast<double>(v->as_int64());
  } else if (v->is_uint64()) {
    d = static_cast<double>(v->as_uint64());
  } else {
    return wrong_type(key, "a number", *v);
  }
  if (!std::isfinite(d)) return make_error(ErrorCode::kOutOfRange, "{} must be a finite number", key);
  return std::optional<double>(d);
}

// A number field in [lo, hi] (or (lo, hi] when lo_open) stored into `out` when given.
// A sampling parameter: a number inside its range (common/sampling_params.h).
Status read_float(const json::object& obj, const SamplingRange& range, float& out) {
  HEARTH_ASSIGN_OR_RETURN(const auto v, opt_number(obj, range.name));
  if (!v) return Status::ok();
  HEARTH_RETURN_IF_ERROR(sampling_range_check(range, *v));
  out = static_cast<float>(*v);
  return Status::ok();
}

Status read_bool(const json::object& obj, std::string_view key, bool& out) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_bool()) return wrong_type(key, "true or false", *v);
  out = v->as_bool();
  return Status::ok();
}

Result<std::optional<std::string>> opt_string(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return wrong_type(key, "a string", *v);
  return std::optional<std::string>(std::string(v->as_string()));
}

// A list of token ids: every element an integer in [0, int32 max].
Result<std::vector<int32_t>> token_ids_of(const json::array& arr, std::string_view path) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    if (!arr[i].is_int64() && !arr[i].is_uint64() && !arr[i].is_double()) return wrong_type(at, "a token id", arr[i]);
    HEARTH_ASSIGN_OR_RETURN(const int64_t id, integer_of(arr[i], at));
    if (id < 0 || id > kInt32Max) return make_error(ErrorCode::kOutOfRange, "{} is not a token id: {}", at, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

bool is_number(const json::value& v) { return v.is_int64() || v.is_uint64() || v.is_double(); }

Status parse_prompt(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "prompt");
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "prompt is required");
  constexpr std::string_view kShapes = "a string, an array of token ids or an array holding one string";
  if (v->is_string()) {
    req.prompt = std::string(v->as_string());
    return Status::ok();
  }
  if (!v->is_array()) return wrong_type("prompt", kShapes, *v);
  const json::array& arr = v->as_array();
  if (arr.empty()) return make_error(ErrorCode::kInvalidArgument, "prompt must not be empty");
  const bool all_strings = std::all_of(arr.begin(), arr.end(), [](const json::value& e) { return e.is_string(); });
  const bool all_numbers = std::all_of(arr.begin(), arr.end(), is_number);
  const bool all_arrays = std::all_of(arr.begin(), arr.end(), [](const json::value& e) { return e.is_array(); });
  if (all_strings || all_arrays) {
    if (arr.size() > 1) {
      return make_error(ErrorCode::kInvalidArgument,
                        "prompt: only one prompt per request is supported; use n for several completions "
                        "(got {} prompts)",
                        arr.size());
    }
    if (all_strings) {
      req.prompt = std::string(arr[0].as_string());
      return Status::ok();
    }
    const json::array& ids = arr[0].as_array();
    if (ids.empty()) return make_error(ErrorCode::kInvalidArgument, "prompt must not be empty");
    HEARTH_ASSIGN_OR_RETURN(req.prompt_tokens, token_ids_of(ids, "prompt[0]"));
    return Status::ok();
  }
  if (all_numbers) {
    HEARTH_ASSIGN_OR_RETURN(req.prompt_tokens, token_ids_of(arr, "prompt"));
    return Status::ok();
  }
  return make_error(ErrorCode::kInvalidArgument, "prompt must be {}; this array mixes kinds", kShapes);
}

Result<std::string> message_content(const json::object& msg, const std::string& path, const std::string& role) {
  const json::value* v = field(msg, "content");
  const std::string at = path + ".content";
  if (v == nullptr) {
    if (role == "assistant") return std::string();  // e.g. a message that only made tool calls
    return make_error(ErrorCode::kInvalidArgument, "{} is required for a {} message", at, role);
  }
  if (v->is_string()) return std::string(v->as_string());
  if (!v->is_array()) return wrong_type(at, "a string or an array of content parts", *v);
  std::string text;
  const json::array& parts = v->as_array();
  for (size_t j = 0; j < parts.size(); ++j) {
    const std::string part_at = fmt::format("{}[{}]", at, j);
    if (!parts[j].is_object()) return wrong_type(part_at, "an object", parts[j]);
    const json::object& part = parts[j].as_object();
    const json::value* type = field(part, "type");
    if (type == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.type is required", part_at);
    if (!type->is_string()) return wrong_type(part_at + ".type", "a string", *type);
    if (type->as_string() != "text") {
      return make_error(ErrorCode::kUnsupported, "{}.type {} is not supported: only text parts are", part_at,
                        short_quote(std::string_view(type->as_string())));
    }
    const json::value* t = field(part, "text");
    if (t == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.text is required", part_at);
    if (!t->is_string()) return wrong_type(part_at + ".text", "a string", *t);
    if (j > 0) text += '\n';
    text.append(t->as_string().data(), t->as_string().size());
  }
  return text;
}

bool is_tool_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
             std::string_view::npos;
}

// A message's name, tool_calls and tool_call_id, checked, as the chat template sees them:
// each call's arguments as an object (HF templates write them with tojson).
Result<json::object> message_extra(const json::object& msg, const std::string& path, const std::string& role) {
  json::object extra;
  if (const json::value* name = field(msg, "name"); name != nullptr) {
    if (!name->is_string()) return wrong_type(path + ".name", "a string", *name);
    extra["name"] = *name;
  }
  if (const json::value* id = field(msg, "tool_call_id"); id != nullptr) {
    if (!id->is_string()) return wrong_type(path + ".tool_call_id", "a string", *id);
    if (role != "tool") {
      return make_error(ErrorCode::kInvalidArgument, "{}.tool_call_id belongs to tool messages only", path);
    }
    extra["tool_call_id"] = *id;
  }
  if (const json::value* calls = field(msg, "tool_calls"); calls != nullptr) {
    if (role != "assistant") {
      return make_error(ErrorCode::kInvalidArgument, "{}.tool_calls belongs to assistant messages only", path);
    }
    if (!calls->is_array()) return wrong_type(path + ".tool_calls", "an array", *calls);
    json::array out;
    for (size_t j = 0; j < calls->as_array().size(); ++j) {
      const std::string at = fmt::format("{}.tool_calls[{}]", path, j);
      const json::value& c = calls->as_array()[j];
      if (!c.is_object()) return wrong_type(at, "an object", c);
      const json::value* id = field(c.as_object(), "id");
      const json::value* type = field(c.as_object(), "type");
      const json::value* fn = field(c.as_object(), "function");
      if (id != nullptr && !id->is_string()) return wrong_type(at + ".id", "a string", *id);
      if (type != nullptr && !(type->is_string() && type->as_string() == "function")) {
        return make_error(ErrorCode::kInvalidArgument, "{}.type must be \"function\"", at);
      }
      if (fn == nullptr || !fn->is_object()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.function is required: an object with name and arguments", at);
      }
      const json::value* name = field(fn->as_object(), "name");
      if (name == nullptr || !name->is_string()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.function.name is required: a string", at);
      }
      json::value args = json::object();
      if (const json::value* a = field(fn->as_object(), "arguments"); a != nullptr) {
        if (a->is_string()) {
          boost::system::error_code ec;
          args = json::parse(a->as_string(), ec);
          if (ec || !args.is_object()) {
            return make_error(ErrorCode::kInvalidArgument, "{}.function.arguments must hold a JSON object", at);
          }
        } else if (a->is_object()) {
          args = *a;
        } else {
          return wrong_type(at + ".function.arguments", "a string of JSON", *a);
        }
      }
      out.push_back(json::object{{"id", id != nullptr ? *id : json::value("")},
                                 {"type", "function"},
                                 {"function", json::object{{"name", *name}, {"arguments", std::move(args)}}}});
    }
    extra["tool_calls"] = std::move(out);
  }
  return extra;
}

Status parse_messages(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "messages");
  if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "messages is required");
  if (!v->is_array()) return wrong_type("messages", "an array of messages", *v);
  const json::array& arr = v->as_array();
  if (arr.empty()) return make_error(ErrorCode::kInvalidArgument, "messages must hold at least one message");
  req.messages.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string path = fmt::format("messages[{}]", i);
    if (!arr[i].is_object()) return wrong_type(path, "an object", arr[i]);
    const json::object& msg = arr[i].as_object();
    const json::value* role_v = field(msg, "role");
    if (role_v == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.role is required", path);
    if (!role_v->is_string()) return wrong_type(path + ".role", "a string", *role_v);
    std::string role(role_v->as_string());
    if (role == "developer") role = "system";
    if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
      return make_error(ErrorCode::kInvalidArgument,
                        "{}.role must be one of system, developer, user, assistant, tool, not {}", path,
                        short_quote(role));
    }
    HEARTH_ASSIGN_OR_RETURN(std::string content, message_content(msg, path, role));
    HEARTH_ASSIGN_OR_RETURN(json::object extra, message_extra(msg, path, role));
    req.messages.push_back(ApiMessage{std::move(role), std::move(content), std::move(extra)});
  }
  return Status::ok();
}

Status parse_stop(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "stop");
  if (v == nullptr) return Status::ok();
  if (v->is_string()) {
    if (!v->as_string().empty()) req.stop.emplace_back(v->as_string());
    return Status::ok();
  }
  if (!v->is_array()) return wrong_type("stop", "a string or an array of strings", *v);
  const json::array& arr = v->as_array();
  if (arr.size() > kMaxStopStrings) {
    return make_error(ErrorCode::kInvalidArgument, "stop may hold at most {} strings, not {}", kMaxStopStrings,
                      arr.size());
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string()) return wrong_type(fmt::format("stop[{}]", i), "a string", arr[i]);
    if (!arr[i].as_string().empty()) req.stop.emplace_back(arr[i].as_string());
  }
  return Status::ok();
}

Status parse_logprobs(const json::object& obj, ApiRequest& req) {
  if (req.endpoint == ApiEndpoint::kCompletions) {
    HEARTH_ASSIGN_OR_RETURN(const auto n, opt_integer_in(obj, "logprobs", 0, kMaxTopLogprobs));
    req.logprobs = n ? static_cast<int32_t>(*n) : -1;
    return Status::ok();
  }
  bool want = false;
  HEARTH_RETURN_IF_ERROR(read_bool(obj, "logprobs", want));
  HEARTH_ASSIGN_OR_RETURN(const auto top, opt_integer_in(obj, "top_logprobs", 0, kMaxTopLogprobs));
  if (top && !want) return make_error(ErrorCode::kInvalidArgument, "top_logprobs requires logprobs to be true");
  req.logprobs = want ? static_cast<int32_t>(top.value_or(0)) : -1;
  return Status::ok();
}

Status parse_max_tokens(const json::object& obj, ApiRequest& req) {
  const int64_t min = req.endpoint == ApiEndpoint::kCompletions ? 0 : 1;  // 0 with echo: score the prompt
  HEARTH_ASSIGN_OR_RETURN(auto max_tokens, opt_integer_in(obj, "max_tokens", min, kInt32Max));
  if (req.endpoint == ApiEndpoint::kChatCompletions) {
    HEARTH_ASSIGN_OR_RETURN(const auto max_completion, opt_integer_in(obj, "max_completion_tokens", 1, kInt32Max));
    if (max_completion) max_tokens = max_completion;  // the newer name wins
  }
  if (max_tokens) req.max_tokens = static_cast<int32_t>(*max_tokens);
  return Status::ok();
}

Status parse_sampling(const json::object& obj, ApiRequest& req) {
  SamplingParams& p = req.sampling;
  HEARTH_RETURN_IF_ERROR(read_float(obj, kTemperatureRange, p.temperature));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kTopPRange, p.top_p));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kMinPRange, p.min_p));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kPresencePenaltyRange, p.presence_penalty));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kFrequencyPenaltyRange, p.frequency_penalty));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kRepetitionPenaltyRange, p.repetition_penalty));
  HEARTH_ASSIGN_OR_RETURN(const auto top_k, opt_integer_in(obj, "top_k", -1, kInt32Max));
  if (top_k) p.top_k = *top_k < 0 ? 0 : static_cast<int32_t>(*top_k);
  if (const json::value* seed = field(obj, "seed"); seed != nullptr) {
    if (seed->is_uint64()) {
      req.seed = seed->as_uint64();
    } else {
      HEARTH_ASSIGN_OR_RETURN(const int64_t s, integer_of(*seed, "seed"));
      if (s < 0) return make_error(ErrorCode::kOutOfRange, "seed must be at least 0, not {}", s);
      req.seed = static_cast<uint64_t>(s);
    }
  }
  HEARTH_ASSIGN_OR_RETURN(const auto n, opt_integer_in(obj, "n", 1, kMaxChoices));
  if (n) req.n = static_cast<int32_t>(*n);
  return Status::ok();
}

Status parse_streaming(const json::object& obj, ApiRequest& req) {
  HEARTH_RETURN_IF_ERROR(read_bool(obj, "stream", req.stream));
  const json::value* opts = field(obj, "stream_options");
  if (opts == nullptr) return Status::ok();
  if (!opts->is_object()) return wrong_type("stream_options", "an object", *opts);
  if (!req.stream) return make_error(ErrorCode::kInvalidArgument, "stream_options is only allowed when stream is true");
  if (const json::value* usage = field(opts->as_object(), "include_usage"); usage != nullptr) {
    if (!usage->is_bool()) return wrong_type("stream_options.include_usage", "true or false", *usage);
    req.include_usage = usage->as_bool();
  }
  if (const json::value* c = field(opts->as_object(), "continuous_usage_stats"); c != nullptr) {
    if (!c->is_bool()) return wrong_type("stream_options.continuous_usage_stats", "true or false", *c);
    req.continuous_usage_stats = c->as_bool();
  }
  return Status::ok();
}

// ---- structured output, tools, logit bias and the rest of the sampling surface ---------

Status parse_constraint(const json::object& obj, ApiRequest& req) {
  auto set = [&](ApiConstraint c) -> Status {
    if (req.constraint) {
      return make_error(ErrorCode::kInvalidArgument, "{} cannot be given with {}: one constraint per request",
                        c.param, req.constraint->param);
    }
    req.constraint = std::move(c);
    return Status::ok();
  };
  if (const json::value* v = field(obj, "response_format"); v != nullptr) {
    if (!v->is_object()) return wrong_type("response_format", "an object with a type", *v);
    const json::object& rf = v->as_object();
    const json::value* type = field(rf, "type");
    if (type == nullptr || !type->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "response_format.type is required: text, json_object or json_schema");
    }
    const std::string_view t(type->as_string().data(), type->as_string().size());
    for (const auto& kv : rf) {
      const std::string_view k(kv.key().data(), kv.key().size());
      if (k != "type" && !(k == "json_schema" && t == "json_schema")) {
        return make_error(ErrorCode::kInvalidArgument, "unknown field response_format.{}: a {} response_format has none",
                          k, short_quote(t));
      }
    }
    if (t == "json_object") {
      HEARTH_RETURN_IF_ERROR(set({.kind = ApiConstraint::Kind::kJsonObject, .param = "response_format"}));
    } else if (t == "json_schema") {
      const json::value* js = field(rf, "json_schema");
      if (js == nullptr || !js->is_object()) {
        return make_error(ErrorCode::kInvalidArgument,
                          "response_format.json_schema is required: an object with name, schema and strict");
      }
      ApiConstraint c{.kind = ApiConstraint::Kind::kJsonSchema, .param = "response_format"};
      for (const auto& kv : js->as_object()) {
        const std::string_view k(kv.key().data(), kv.key().size());
        if (k == "name" || k == "description") {
          if (!kv.value().is_string()) return wrong_type(fmt::format("response_format.json_schema.{}", k), "a string", kv.value());
        } else if (k == "strict") {
          if (!kv.value().is_bool() && !kv.value().is_null()) {
            return wrong_type("response_format.json_schema.strict", "true or false", kv.value());
          }
        } else if (k == "schema") {
          if (!kv.value().is_object() && !kv.value().is_bool()) {
            return wrong_type("response_format.json_schema.schema", "a JSON schema object", kv.value());
          }
          c.schema = kv.value();
        } else {
          return make_error(ErrorCode::kInvalidArgument, "unknown field response_format.json_schema.{}", k);
        }
      }
      if (c.schema.is_null()) c.kind = ApiConstraint::Kind::kJsonObject;  // no schema: any JSON object
      HEARTH_RETURN_IF_ERROR(set(std::move(c)));
    } else if (t != "text") {
      return make_error(ErrorCode::kInvalidArgument,
                        "response_format.type must be text, json_object or json_schema, not {}", short_quote(t));
    }
  }
  if (const json::value* v = field(obj, "guided_json"); v != nullptr) {
    ApiConstraint c{.kind = ApiConstraint::Kind::kJsonSchema, .param = "guided_json"};
    if (v->is_string()) {
      boost::system::error_code ec;
      c.schema = json::parse(v->as_string(), ec);
      if (ec) return make_error(ErrorCode::kInvalidArgument, "guided_json is a string but not JSON: {}", ec.message());
    } else {
      c.schema = *v;
    }
    if (!c.schema.is_object() && !c.schema.is_bool()) return wrong_type("guided_json", "a JSON schema", c.schema);
    HEARTH_RETURN_IF_ERROR(set(std::move(c)));
  }
  if (const json::value* v = field(obj, "guided_regex"); v != nullptr) {
    if (!v->is_string()) return wrong_type("guided_regex", "a string", *v);
    HEARTH_RETURN_IF_ERROR(
        set({.kind = ApiConstraint::Kind::kRegex, .text = std::string(v->as_string()), .param = "guided_regex"}));
  }
  if (const json::value* v = field(obj, "guided_grammar"); v != nullptr) {
    if (!v->is_string()) return wrong_type("guided_grammar", "a string of GBNF", *v);
    HEARTH_RETURN_IF_ERROR(
        set({.kind = ApiConstraint::Kind::kGrammar, .text = std::string(v->as_string()), .param = "guided_grammar"}));
  }
  if (const json::value* v = field(obj, "guided_choice"); v != nullptr) {
    if (!v->is_array() || v->as_array().empty()) return wrong_type("guided_choice", "a non-empty array of strings", *v);
    ApiConstraint c{.kind = ApiConstraint::Kind::kChoice, .param = "guided_choice"};
    for (const json::value& x : v->as_array()) {
      if (!x.is_string()) return wrong_type("guided_choice", "a non-empty array of strings", *v);
      c.choices.emplace_back(x.as_string());
    }
    HEARTH_RETURN_IF_ERROR(set(std::move(c)));
  }
  return Status::ok();
}

Status parse_tools(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "tools");
  if (v != nullptr) {
    if (!v->is_array()) return wrong_type("tools", "an array of tools", *v);
    for (size_t i = 0; i < v->as_array().size(); ++i) {
      const std::string at = fmt::format("tools[{}]", i);
      const json::value& t = v->as_array()[i];
      if (!t.is_object()) return wrong_type(at, "an object", t);
      const json::value* type = field(t.as_object(), "type");
      if (type == nullptr || !type->is_string() || type->as_string() != "function") {
        return make_error(ErrorCode::kUnsupported, "{}.type is not supported: hearth calls tools of type \"function\" only", at);
      }
      const json::value* fn = field(t.as_object(), "function");
      if (fn == nullptr || !fn->is_object()) return make_error(ErrorCode::kInvalidArgument, "{}.function is required", at);
      ApiTool tool;
      for (const auto& kv : fn->as_object()) {
        const std::string_view k(kv.key().data(), kv.key().size());
        const std::string fat = fmt::format("{}.function.{}", at, k);
        if (k == "name") {
          if (!kv.value().is_string() || !is_tool_name(std::string_view(kv.value().as_string()))) {
            return make_error(ErrorCode::kInvalidArgument, "{} must be 1 to 64 letters, digits, _ or -", fat);
          }
          tool.name = std::string(kv.value().as_string());
        } else if (k == "description") {
          if (!kv.value().is_string()) return wrong_type(fat, "a string", kv.value());
          tool.description = std::string(kv.value().as_string());
        } else if (k == "parameters") {
          if (!kv.value().is_object() && !kv.value().is_null()) return wrong_type(fat, "a JSON schema object", kv.value());
          tool.parameters = kv.value();
        } else if (k == "strict") {
          if (!kv.value().is_bool() && !kv.value().is_null()) return wrong_type(fat, "true or false", kv.value());
        } else {
          return make_error(ErrorCode::kInvalidArgument, "unknown field {}", fat);
        }
      }
      if (tool.name.empty()) return make_error(ErrorCode::kInvalidArgument, "{}.function.name is required", at);
      for (const ApiTool& other : req.tools) {
        if (other.name == tool.name) {
          return make_error(ErrorCode::kInvalidArgument, "tools defines the function {} twice", tool.name);
        }
      }
      tool.definition = t;
      req.tools.push_back(std::move(tool));
    }
  }
  if (!req.tools.empty()) req.tool_choice = ApiToolChoice::kAuto;
  if (const json::value* c = field(obj, "tool_choice"); c != nullptr) {
    if (c->is_string()) {
      const std::string_view s(c->as_string().data(), c->as_string().size());
      if (s == "none") {
        req.tool_choice = ApiToolChoice::kNone;
      } else if (s == "auto") {
        req.tool_choice = req.tools.empty() ? ApiToolChoice::kNone : ApiToolChoice::kAuto;
      } else if (s == "required") {
        req.tool_choice = ApiToolChoice::kRequired;
      } else {
        return make_error(ErrorCode::kInvalidArgument, "tool_choice must be none, auto, required or a function, not {}",
                          short_quote(s));
      }
    } else if (c->is_object()) {
      const json::value* fn = field(c->as_object(), "function");
      const json::value* name = fn != nullptr && fn->is_object() ? field(fn->as_object(), "name") : nullptr;
      if (name == nullptr || !name->is_string()) {
        return make_error(ErrorCode::kInvalidArgument,
                          "tool_choice must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}");
      }
      req.tool_choice = ApiToolChoice::kNamed;
      req.tool_choice_name = std::string(name->as_string());
    } else {
      return wrong_type("tool_choice", "a string or an object", *c);
    }
    if ((req.tool_choice == ApiToolChoice::kRequired || req.tool_choice == ApiToolChoice::kNamed) && req.tools.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "tool_choice asks for a tool call, but tools defines none");
    }
    if (req.tool_choice == ApiToolChoice::kNamed &&
        std::none_of(req.tools.begin(), req.tools.end(),
                     [&](const ApiTool& t) { return t.name == req.tool_choice_name; })) {
      return make_error(ErrorCode::kInvalidArgument, "tool_choice names the function {}, which tools does not define",
                        short_quote(req.tool_choice_name));
    }
  }
  if (const json::value* p = field(obj, "parallel_tool_calls"); p != nullptr) {
    if (!p->is_bool()) return wrong_type("parallel_tool_calls", "true or false", *p);
    req.parallel_tool_calls = p->as_bool();
  }
  if (req.constraint && (req.tool_choice == ApiToolChoice::kRequired || req.tool_choice == ApiToolChoice::kNamed)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tool_choice cannot force a tool call together with {}: the output is one or the other",
                      req.constraint->param);
  }
  return Status::ok();
}

Status parse_sampling_extras(const json::object& obj, ApiRequest& req) {
  if (const json::value* v = field(obj, "logit_bias"); v != nullptr) {
    if (!v->is_object()) return wrong_type("logit_bias", "an object of token ids to biases", *v);
    if (v->as_object().size() > static_cast<size_t>(kMaxLogitBias)) {
      return make_error(ErrorCode::kInvalidArgument, "logit_bias has {} entries; at most {} are accepted",
                        v->as_object().size(), kMaxLogitBias);
    }
    for (const auto& kv : v->as_object()) {
      const std::string_view key(kv.key().data(), kv.key().size());
      int64_t id = -1;
      const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > kInt32Max) {
        return make_error(ErrorCode::kInvalidArgument, "logit_bias keys must be token ids, not {}", short_quote(key));
      }
      if (!is_number(kv.value())) return wrong_type(fmt::format("logit_bias[\"{}\"]", key), "a number", kv.value());
      const double bias = kv.value().to_number<double>();
      if (!kLogitBiasRange.contains(bias)) {
        return make_error(ErrorCode::kOutOfRange, "logit_bias of token {} must be between -100 and 100, not {}", id,
                          bias);
      }
      req.logit_bias.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
    }
  }
  if (const json::value* v = field(obj, "suffix"); v != nullptr) {
    if (!v->is_string()) return wrong_type("suffix", "a string", *v);
    if (!v->as_string().empty()) req.suffix = std::string(v->as_string());
  }
  HEARTH_ASSIGN_OR_RETURN(const auto best_of, opt_integer_in(obj, "best_of", 1, kMaxChoices));
  if (best_of) {
    if (*best_of < req.n) {
      return make_error(ErrorCode::kInvalidArgument, "best_of must be at least n ({}), not {}", req.n, *best_of);
    }
    if (*best_of > req.n && req.stream) {
      return make_error(ErrorCode::kInvalidArgument, "best_of cannot be used with stream: the best is known at the end");
    }
    req.best_of = static_cast<int32_t>(*best_of);
  }
  HEARTH_ASSIGN_OR_RETURN(const auto min_tokens, opt_integer_in(obj, "min_tokens", 0, kInt32Max));
  if (min_tokens) {
    if (req.max_tokens && *min_tokens > *req.max_tokens) {
      return make_error(ErrorCode::kInvalidArgument, "min_tokens ({}) must not exceed max_tokens ({})", *min_tokens,
                        *req.max_tokens);
    }
    req.min_tokens = static_cast<int32_t>(*min_tokens);
  }
  if (const json::value* v = field(obj, "stop_token_ids"); v != nullptr) {
    if (!v->is_array()) return wrong_type("stop_token_ids", "an array of token ids", *v);
    HEARTH_ASSIGN_OR_RETURN(req.stop_token_ids, token_ids_of(v->as_array(), "stop_token_ids"));
  }
  return Status::ok();
}

// ---- fields hearth does not implement --------------------------------------------------

uint8_t endpoint_bit(ApiEndpoint e) { return e == ApiEndpoint::kCompletions ? kCompletionsOnly : kChatOnly; }
std::string_view endpoint_path(ApiEndpoint e) {
  return e == ApiEndpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

// A name as an error message shows it: as given when it is a plain identifier.
std::string shown_name(std::string_view name) {
  const bool plain = !name.empty() && name.size() <= 64 &&
                     name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.[]") ==
                         std::string_view::npos;
  return plain ? std::string(name) : short_quote(name);
}

// A key no schema of `endpoint` has: a 400 naming it, or, with lenient fields, noted.
Status unknown_field(std::string_view path, ApiEndpoint endpoint, const ApiParseOptions& options, ApiRequest& req) {
  if (options.lenient_fields) {
    req.ignored_fields.emplace_back(path);
    return Status::ok();
  }
  return make_error(ErrorCode::kInvalidArgument,
                    "unknown field {}: POST {} has no such field, and this server refuses what it would otherwise "
                    "ignore (hearth-frontend --lenient-fields accepts and ignores unknown fields)",
                    shown_name(path), endpoint_path(endpoint));
}

bool is_empty_array(const json::value& v) { return v.is_array() && v.as_array().empty(); }

// The schema fields hearth does not implement: accepted only with the values that ask for
// nothing it lacks, else a 400 saying so.
Status refuse_unimplemented(const json::object& obj, const ApiRequest& req) {
  auto unsupported = [](std::string_view what, std::string_view why) {
    return make_error(ErrorCode::kUnsupported, "{} is not supported: {}", what, why);
  };
  for (const UnimplementedField& f : kUnimplementedFields) {
    if ((f.endpoints & endpoint_bit(req.endpoint)) == 0) continue;
    const json::value* v = field(obj, f.name);
    if (v == nullptr) continue;
    const std::string_view name = f.name;
    if (name == "functions") {
      if (is_empty_array(*v)) continue;
      if (!v->is_array()) return wrong_type(name, "an array", *v);
      return unsupported(name, "functions is deprecated; hearth calls tools given as tools");
    } else if (name == "function_call") {
      if (v->is_string() && v->as_string() == "none") continue;
      return unsupported("function_call other than \"none\"", "it is deprecated; use tool_choice");
    } else if (name == "store") {
      if (!v->is_bool()) return wrong_type(name, "true or false", *v);
      if (v->as_bool()) return unsupported("store true", "hearth keeps no completions");
    } else if (name == "metadata") {
      if (!v->is_object()) return wrong_type(name, "an object", *v);  // tags for stored completions: none here
    } else if (name == "service_tier") {
      if (v->is_string() && (v->as_string() == "auto" || v->as_string() == "default")) continue;
      return unsupported("service_tier other than auto or default", "hearth has one tier");
    } else if (name == "modalities") {
      if (v->is_array() && v->as_array().size() == 1 && v->as_array()[0].is_string() &&
          v->as_array()[0].as_string() == "text") {
        continue;
      }
      return unsupported("modalities other than [\"text\"]", "hearth generates text only");
    } else {
      return unsupported(name, "this server does not implement it");
    }
  }
  return Status::ok();
}

// Every key of the request and of its nested objects is one hearth implements, refuses
// by name, or (lenient) ignores and notes.
Status check_fields(const json::object& obj, const ApiParseOptions& options, ApiRequest& req) {
  const uint8_t bit = endpoint_bit(req.endpoint);
  for (const auto& kv : obj) {
    const std::string_view name(kv.key().data(), kv.key().size());
    const bool implemented = std::any_of(kImplementedFields.begin(), kImplementedFields.end(), [&](const auto& f) {
      return f.name == name && (f.endpoints & bit) != 0;
    });
    const bool refused = std::any_of(kUnimplementedFields.begin(), kUnimplementedFields.end(), [&](const auto& f) {
      return f.name == name && (f.endpoints & bit) != 0;
    });
    if (!implemented && !refused) HEARTH_RETURN_IF_ERROR(unknown_field(name, req.endpoint, options, req));
  }
  if (const json::value* opts = field(obj, "stream_options"); opts != nullptr && opts->is_object()) {
    for (const auto& kv : opts->as_object()) {
      const std::string_view name(kv.key().data(), kv.key().size());
      if (name == "include_usage" || name == "continuous_usage_stats") continue;
      HEARTH_RETURN_IF_ERROR(unknown_field(fmt::format("stream_options.{}", name), req.endpoint, options, req));
    }
  }
  if (const json::value* msgs = field(obj, "messages"); msgs != nullptr && msgs->is_array()) {
    const json::array& arr = msgs->as_array();
    for (size_t i = 0; i < arr.size(); ++i) {
      if (!arr[i].is_object()) continue;  // parse_messages says what is wrong
      for (const auto& kv : arr[i].as_object()) {
        const std::string_view name(kv.key().data(), kv.key().size());
        if (name == "role" || name == "content" || kv.value().is_null()) continue;
        if (name == "name" || name == "tool_calls" || name == "tool_call_id") continue;  // parse_messages reads them
        const std::string path = fmt::format("messages[{}].{}", i, name);
        if (name == "function_call") {
          return make_error(ErrorCode::kUnsupported, "{} is not supported: it is deprecated; use tool_calls", path);
        }
        if (name == "refusal" || name == "audio") {
          return make_error(ErrorCode::kUnsupported,
                            "{} is not supported: the chat template is given each message's role, content, name "
                            "and tool calls",
                            path);
        }
        HEARTH_RETURN_IF_ERROR(unknown_field(path, req.endpoint, options, req));
      }
    }
  }
  return refuse_unimplemented(obj, req);
}

// ---- building responses -------------------------------------------------------------

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
                      {"prompt_tokens_details", json::object{{"cached_tokens", usage.cached_tokens}}}};
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

// The request field a message begins with ("temperature must ...", "messages[2].role ..."),
// or "" when it begins with anything else.
std::string_view param_of(std::string_view message) {
  constexpr std::string_view kUnknown = "unknown field ";
  const bool unknown = message.starts_with(kUnknown);
  if (unknown) message.remove_prefix(kUnknown.size());
  const std::string_view head = message.substr(0, message.find_first_of(" :"));
  if (unknown) return head;
  return is_request_field(head.substr(0, head.find_first_of(".["))) ? head : std::string_view();
}

}  // namespace

Result<ApiRequest> api_parse_request(std::string_view body, ApiEndpoint endpoint, const ApiParseOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const json::value doc, json_parse(body, "request body", kMaxRequestDepth));
  if (!doc.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the request body must be a JSON object, not {}", kind_of(doc));
  }
  const json::object& obj = doc.as_object();
  ApiRequest req;
  req.endpoint = endpoint;
  HEARTH_ASSIGN_OR_RETURN(const auto model, opt_string(obj, "model"));
  req.model = model.value_or("");
  if (endpoint == ApiEndpoint::kCompletions) {
    HEARTH_RETURN_IF_ERROR(parse_prompt(obj, req));
    HEARTH_RETURN_IF_ERROR(read_bool(obj, "echo", req.echo));
  } else {
    HEARTH_RETURN_IF_ERROR(parse_messages(obj, req));
  }
  HEARTH_RETURN_IF_ERROR(parse_max_tokens(obj, req));
  HEARTH_RETURN_IF_ERROR(parse_sampling(obj, req));
  HEARTH_RETURN_IF_ERROR(parse_stop(obj, req));
  HEARTH_RETURN_IF_ERROR(parse_streaming(obj, req));
  HEARTH_RETURN_IF_ERROR(parse_logprobs(obj, req));
  HEARTH_RETURN_IF_ERROR(read_bool(obj, "ignore_eos", req.ignore_eos));
  HEARTH_RETURN_IF_ERROR(parse_constraint(obj, req));
  if (endpoint == ApiEndpoint::kChatCompletions) HEARTH_RETURN_IF_ERROR(parse_tools(obj, req));
  HEARTH_RETURN_IF_ERROR(parse_sampling_extras(obj, req));
  HEARTH_ASSIGN_OR_RETURN(req.user, opt_string(obj, "user"));
  for (const char* id : {"safety_identifier", "prompt_cache_key"}) {
    if (req.endpoint == ApiEndpoint::kChatCompletions) HEARTH_RETURN_IF_ERROR(opt_string(obj, id).status());
  }
  HEARTH_RETURN_IF_ERROR(check_fields(obj, options, req));
  return req;
}

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
  const std::string_view param = param_of(status.message());
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

std::string api_stream_usage_chunk(const ApiRequest& request, const ApiResponseHead& head, const ApiUsage& usage) {
  json::object body = envelope(request, head, /*chunk=*/true);
  body["choices"] = json::array();
  body["usage"] = usage_object(usage);
  return sse_event(body);
}

std::string api_stream_error(const Status& status) { return "data: " + api_error_body(status) + "\n\n"; }

}  // namespace hearth
