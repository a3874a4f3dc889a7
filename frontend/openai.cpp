#include "frontend/openai.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "common/json.h"
#include "common/utf8.h"
#include "frontend/request_json.h"

namespace hearth {
namespace {

using namespace request_json;

// Request bodies nest a few levels (body > messages > message > content > part); unknown
// fields such as tool schemas may go deeper, but never this deep.
constexpr size_t kMaxRequestDepth = 32;
constexpr size_t kMaxStopStrings = 4;

// Where a top-level field of the OpenAI schemas (and of the extensions hearth honours) is
// implemented: a request to another endpoint gets a 400 for it, as for an unknown field.
constexpr uint8_t kCompletionsOnly = 1, kChatOnly = 2, kBoth = 3;
struct ImplementedField {
  std::string_view name;
  uint8_t endpoints;
};
constexpr std::array<ImplementedField, 38> kImplementedFields = {{
    {"model", kBoth}, {"prompt", kCompletionsOnly}, {"messages", kChatOnly}, {"max_tokens", kBoth},
    {"max_completion_tokens", kChatOnly}, {"temperature", kBoth}, {"top_p", kBoth}, {"top_k", kBoth},
    {"min_p", kBoth}, {"presence_penalty", kBoth}, {"frequency_penalty", kBoth}, {"repetition_penalty", kBoth},
    {"seed", kBoth}, {"stop", kBoth}, {"n", kBoth}, {"stream", kBoth}, {"stream_options", kBoth},
    {"echo", kCompletionsOnly}, {"logprobs", kBoth}, {"top_logprobs", kChatOnly}, {"ignore_eos", kBoth},
    {"response_format", kBoth}, {"tools", kChatOnly}, {"tool_choice", kChatOnly}, {"parallel_tool_calls", kChatOnly},
    {"logit_bias", kBoth}, {"suffix", kCompletionsOnly}, {"best_of", kCompletionsOnly}, {"min_tokens", kBoth},
    {"stop_token_ids", kBoth}, {"chat_template_kwargs", kChatOnly},
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
  if (const json::value* r = field(msg, "reasoning_content"); r != nullptr) {
    if (!r->is_string()) return wrong_type(path + ".reasoning_content", "a string", *r);
    if (role != "assistant") {
      return make_error(ErrorCode::kInvalidArgument, "{}.reasoning_content belongs to assistant messages only", path);
    }
    extra["reasoning_content"] = *r;  // templates that show past reasoning read it
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

// chat_template_kwargs (vLLM's): more variables for the chat template, such as
// enable_thinking; those the server sets itself are refused.
Status parse_template_kwargs(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "chat_template_kwargs");
  if (v == nullptr) return Status::ok();
  if (!v->is_object()) return wrong_type("chat_template_kwargs", "an object", *v);
  for (const auto& kv : v->as_object()) {
    const std::string_view k(kv.key().data(), kv.key().size());
    if (k == "messages" || k == "tools" || k == "add_generation_prompt" || k == "bos_token" || k == "eos_token") {
      return make_error(ErrorCode::kInvalidArgument,
                        "chat_template_kwargs.{} is set by the server from the request; it cannot be given here", k);
    }
    req.template_kwargs[kv.key()] = kv.value();
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

// ---- fields hearth does not implement --------------------------------------------------

uint8_t endpoint_bit(ApiEndpoint e) { return e == ApiEndpoint::kCompletions ? kCompletionsOnly : kChatOnly; }
std::string_view endpoint_path(ApiEndpoint e) {
  return e == ApiEndpoint::kCompletions ? "/v1/completions" : "/v1/chat/completions";
}

// A key no schema of `endpoint` has: a 400 naming it, or, with lenient fields, noted.
Status unknown_field(std::string_view path, ApiEndpoint endpoint, const ApiParseOptions& options, ApiRequest& req) {
  return unknown_field_of(path, endpoint_path(endpoint), options, req.ignored_fields);
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
        if (name == "name" || name == "tool_calls" || name == "tool_call_id" || name == "reasoning_content") {
          continue;  // parse_messages reads them
        }
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

}  // namespace

std::string_view request_json::error_param(std::string_view message) {
  constexpr std::string_view kUnknown = "unknown field ";
  const bool unknown = message.starts_with(kUnknown);
  if (unknown) message.remove_prefix(kUnknown.size());
  const std::string_view head = message.substr(0, message.find_first_of(" :"));
  if (unknown) return head;
  const std::string_view top = head.substr(0, head.find_first_of(".["));
  return is_request_field(top) || responses_is_field(top) ? head : std::string_view();
}

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
  if (endpoint == ApiEndpoint::kChatCompletions) HEARTH_RETURN_IF_ERROR(parse_template_kwargs(obj, req));
  for (const char* id : {"safety_identifier", "prompt_cache_key"}) {
    if (req.endpoint == ApiEndpoint::kChatCompletions) HEARTH_RETURN_IF_ERROR(opt_string(obj, id).status());
  }
  HEARTH_RETURN_IF_ERROR(check_fields(obj, options, req));
  return req;
}

}  // namespace hearth
