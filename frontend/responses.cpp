// OpenAI's Responses API: POST /v1/responses parsed into an ApiRequest (endpoint
// kResponses), and the answer as a response object or its typed event stream
// (response.created, response.output_item.added, response.output_text.delta,
// response.function_call_arguments.delta, ..., response.completed).
//
// Input items map onto the chat template's messages: `instructions` is a system message
// before them; a message item is a message (input_text / output_text parts joined by
// newlines; developer reads as system); function_call items that follow each other are
// one assistant message's tool_calls; a function_call_output is a tool message.
//
// hearth stores no responses: store must be false or absent (the response says
// "store": false), and previous_response_id, background, conversation and the built-in
// tools are refused by name. With a reasoning parser the reasoning comes back as a
// reasoning item (its text as reasoning_text content, no summary); reasoning items sent
// back are the next assistant turn's reasoning_content.
#include <algorithm>
#include <array>
#include <map>
#include <random>

#include <fmt/format.h>

#include "common/json.h"
#include "frontend/dialect_detail.h"
#include "frontend/request_json.h"

namespace hearth {
namespace {

using namespace request_json;

constexpr size_t kMaxRequestDepth = 32;

constexpr std::array<std::string_view, 19> kResponsesFields = {
    "model",       "input",          "instructions", "tools",    "tool_choice",       "parallel_tool_calls",
    "text",        "max_output_tokens", "temperature", "top_p",   "stream",            "metadata",
    "user",        "store",          "truncation",   "service_tier", "safety_identifier", "prompt_cache_key",
    "reasoning",
};
// In the schema, not served: a 400 naming them unless their value asks for nothing.
constexpr std::array<std::string_view, 10> kRefusedFields = {
    "previous_response_id", "background",   "include",        "prompt",             "max_tool_calls",
    "top_logprobs",         "conversation", "stream_options", "context_management", "prompt_cache_retention",
};

json::string jstr(std::string_view s) { return json::string(s.data(), s.size()); }

// A refused field's value that asks for nothing: false, an empty list, "auto"-like tiers.
Status check_refused(std::string_view name, const json::value& v) {
  if (v.is_null()) return Status::ok();
  if ((name == "background") && v.is_bool() && !v.as_bool()) return Status::ok();
  if ((name == "include") && v.is_array() && v.as_array().empty()) return Status::ok();
  if (name == "stream_options" && v.is_object() && v.as_object().empty()) return Status::ok();
  if (name == "previous_response_id" || name == "conversation") {
    return unsupported(name, "hearth stores no responses; send the whole conversation as input");
  }
  if (name == "background") return unsupported("background true", "responses are answered on their connection");
  return unsupported(name, "this server does not implement it");
}

class ResponsesParser {
 public:
  explicit ResponsesParser(ApiRequest& req) : req_(req) {}

  Status parse_input(const json::object& obj) {
    if (const json::value* v = field(obj, "instructions"); v != nullptr) {
      if (!v->is_string()) return wrong_type("instructions", "a string", *v);
      req_.messages.push_back(ApiMessage{"system", std::string(v->as_string()), {}});
    }
    const json::value* v = field(obj, "input");
    if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "input is required");
    if (v->is_string()) {
      req_.messages.push_back(ApiMessage{"user", std::string(v->as_string()), {}});
      return Status::ok();
    }
    if (!v->is_array()) return wrong_type("input", "a string or an array of input items", *v);
    if (v->as_array().empty()) return make_error(ErrorCode::kInvalidArgument, "input must hold at least one item");
    for (size_t i = 0; i < v->as_array().size(); ++i) HEARTH_RETURN_IF_ERROR(item(v->as_array()[i], i));
    if (req_.messages.empty() || req_.messages.back().role == "assistant") {
      return unsupported("input ending with an assistant message or function_call",
                         "the chat template begins a new assistant turn after the last item");
    }
    return Status::ok();
  }

  Status parse_tools(const json::object& obj) {
    if (const json::value* v = field(obj, "tools"); v != nullptr) {
      if (!v->is_array()) return wrong_type("tools", "an array of tools", *v);
      for (size_t i = 0; i < v->as_array().size(); ++i) {
        const std::string at = fmt::format("tools[{}]", i);
        const json::value& t = v->as_array()[i];
        if (!t.is_object()) return wrong_type(at, "an object", t);
        const json::object& o = t.as_object();
        const json::value* type = field(o, "type");
        if (type == nullptr || !type->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.type is required", at);
        if (type->as_string() != "function") {
          return unsupported(fmt::format("{}.type {}", at, short_quote(std::string_view(type->as_string()))),
                             "hearth runs no built-in tools; define function tools");
        }
        HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "name", "description", "parameters", "strict"}));
        if (const json::value* s = field(o, "strict"); s != nullptr && !s->is_bool()) {
          return wrong_type(at + ".strict", "true or false", *s);
        }
        HEARTH_ASSIGN_OR_RETURN(ApiTool tool, flat_function_tool(o, at, "parameters", /*schema_required=*/false));
        HEARTH_RETURN_IF_ERROR(add_tool(req_, std::move(tool)));
      }
    }
    req_.tool_choice = req_.tools.empty() ? ApiToolChoice::kNone : ApiToolChoice::kAuto;
    if (const json::value* c = field(obj, "tool_choice"); c != nullptr) {
      if (c->is_string()) {
        const std::string_view s(c->as_string().data(), c->as_string().size());
        if (s == "none") {
          req_.tool_choice = ApiToolChoice::kNone;
        } else if (s == "required") {
          req_.tool_choice = ApiToolChoice::kRequired;
        } else if (s != "auto") {
          return make_error(ErrorCode::kInvalidArgument, "tool_choice must be none, auto, required or a function, not {}",
                            short_quote(s));
        }
      } else if (c->is_object()) {
        const json::value* type = field(c->as_object(), "type");
        if (type == nullptr || !type->is_string()) {
          return make_error(ErrorCode::kInvalidArgument, "tool_choice.type is required");
        }
        if (type->as_string() != "function") {
          return unsupported(fmt::format("tool_choice.type {}", short_quote(std::string_view(type->as_string()))),
                             "hearth forces function tools only");
        }
        HEARTH_RETURN_IF_ERROR(only_keys(c->as_object(), "tool_choice", {"type", "name"}));
        const json::value* name = field(c->as_object(), "name");
        if (name == nullptr || !name->is_string()) {
          return make_error(ErrorCode::kInvalidArgument, "tool_choice.name is required: the function's name");
        }
        req_.tool_choice = ApiToolChoice::kNamed;
        req_.tool_choice_name = std::string(name->as_string());
      } else {
        return wrong_type("tool_choice", "a string or an object", *c);
      }
      HEARTH_RETURN_IF_ERROR(tool_choice_check(req_));
    }
    if (const json::value* p = field(obj, "parallel_tool_calls"); p != nullptr) {
      if (!p->is_bool()) return wrong_type("parallel_tool_calls", "true or false", *p);
      req_.parallel_tool_calls = p->as_bool();
    }
    return Status::ok();
  }

 private:
  Status item(const json::value& v, size_t i) {
    const std::string at = fmt::format("input[{}]", i);
    if (!v.is_object()) return wrong_type(at, "an object", v);
    const json::object& o = v.as_object();
    std::string type = "message";
    if (const json::value* t = field(o, "type"); t != nullptr) {
      if (!t->is_string()) return wrong_type(at + ".type", "a string", *t);
      type = std::string(t->as_string());
    }
    if (type == "message") return message(o, at);
    if (type == "function_call") {
      HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "id", "call_id", "name", "arguments", "status"}));
      const json::value* call_id = field(o, "call_id");
      const json::value* name = field(o, "name");
      const json::value* args = field(o, "arguments");
      if (call_id == nullptr || !call_id->is_string()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.call_id is required: a string", at);
      }
      if (name == nullptr || !name->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.name is required: a string", at);
      if (args == nullptr || !args->is_string()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.arguments is required: a string of JSON", at);
      }
      boost::system::error_code ec;
      json::value parsed = json::parse(args->as_string(), ec);
      if (ec || !parsed.is_object()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.arguments must hold a JSON object", at);
      }
      names_[std::string(call_id->as_string())] = std::string(name->as_string());
      // Calls that follow each other (or an assistant's text) are one assistant turn.
      if (req_.messages.empty() || req_.messages.back().role != "assistant") {
        req_.messages.push_back(ApiMessage{"assistant", "", {}});
        take_reasoning();
      }
      json::object& extra = req_.messages.back().extra;
      if (!extra.contains("tool_calls")) extra["tool_calls"] = json::array();
      extra["tool_calls"].as_array().push_back(
          json::object{{"id", *call_id},
                       {"type", "function"},
                       {"function", json::object{{"name", *name}, {"arguments", std::move(parsed)}}}});
      return Status::ok();
    }
    if (type == "function_call_output") {
      HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "id", "call_id", "output", "status"}));
      const json::value* call_id = field(o, "call_id");
      if (call_id == nullptr || !call_id->is_string()) {
        return make_error(ErrorCode::kInvalidArgument, "{}.call_id is required: a string", at);
      }
      const json::value* out = field(o, "output");
      if (out == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.output is required", at);
      std::string text;
      if (out->is_string()) {
        text = std::string(out->as_string());
      } else if (out->is_array()) {
        HEARTH_ASSIGN_OR_RETURN(text, parts_text(out->as_array(), at + ".output", "user"));
      } else {
        return wrong_type(at + ".output", "a string or an array of input_text parts", *out);
      }
      json::object extra{{"tool_call_id", *call_id}};
      if (auto it = names_.find(std::string(call_id->as_string())); it != names_.end()) extra["name"] = it->second;
      req_.messages.push_back(ApiMessage{"tool", std::move(text), std::move(extra)});
      return Status::ok();
    }
    if (type == "reasoning") {
      // Past reasoning, for the next assistant turn's reasoning_content.
      HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "id", "summary", "content", "encrypted_content", "status"}));
      if (field(o, "encrypted_content") != nullptr) {
        return unsupported(at + ".encrypted_content", "this server encrypts no reasoning");
      }
      if (const json::value* c = field(o, "content"); c != nullptr) {
        if (!c->is_array()) return wrong_type(at + ".content", "an array of reasoning_text parts", *c);
        for (size_t j = 0; j < c->as_array().size(); ++j) {
          const json::value& part = c->as_array()[j];
          const json::value* t = part.is_object() ? field(part.as_object(), "text") : nullptr;
          if (t == nullptr || !t->is_string()) {
            return make_error(ErrorCode::kInvalidArgument, "{}.content[{}].text is required: a string", at, j);
          }
          if (!reasoning_.empty()) reasoning_ += '\n';
          reasoning_.append(t->as_string().data(), t->as_string().size());
        }
      }
      return Status::ok();
    }
    if (type == "item_reference") return unsupported(at + ".type item_reference", "hearth stores no items");
    if (type == "input_image" || type == "input_file" || type == "input_audio") {
      return unsupported(fmt::format("{}.type {}", at, type), "hearth serves text models");
    }
    return unsupported(fmt::format("{}.type {}", at, short_quote(type)),
                       "input items are messages, function_call and function_call_output");
  }

  Status message(const json::object& o, const std::string& at) {
    HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "role", "content", "id", "status"}));
    const json::value* role_v = field(o, "role");
    if (role_v == nullptr || !role_v->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "{}.role is required: user, assistant, system or developer", at);
    }
    std::string role(role_v->as_string());
    if (role == "developer") role = "system";
    if (role != "user" && role != "assistant" && role != "system") {
      return make_error(ErrorCode::kInvalidArgument, "{}.role must be user, assistant, system or developer, not {}", at,
                        short_quote(role));
    }
    const json::value* content = field(o, "content");
    if (content == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.content is required", at);
    std::string text;
    if (content->is_string()) {
      text = std::string(content->as_string());
    } else if (content->is_array()) {
      HEARTH_ASSIGN_OR_RETURN(text, parts_text(content->as_array(), at + ".content", role));
    } else {
      return wrong_type(at + ".content", "a string or an array of content parts", *content);
    }
    req_.messages.push_back(ApiMessage{role, std::move(text), {}});
    if (role == "assistant") take_reasoning();
    return Status::ok();
  }

  // A message's parts: input_text (user, system), output_text (assistant).
  Result<std::string> parts_text(const json::array& parts, const std::string& at, const std::string& role) {
    std::string text;
    for (size_t j = 0; j < parts.size(); ++j) {
      const std::string pat = fmt::format("{}[{}]", at, j);
      if (!parts[j].is_object()) return wrong_type(pat, "an object", parts[j]);
      const json::object& p = parts[j].as_object();
      const json::value* type = field(p, "type");
      if (type == nullptr || !type->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.type is required", pat);
      const std::string_view t(type->as_string().data(), type->as_string().size());
      const std::string_view expected = role == "assistant" ? "output_text" : "input_text";
      if (t == "input_image" || t == "input_file" || t == "input_audio") {
        return unsupported(fmt::format("{}.type {}", pat, t), "hearth serves text models");
      }
      if (t == "refusal" && role == "assistant") {
        return unsupported(pat + ".type refusal", "the chat template is given text");
      }
      if (t != expected) {
        return make_error(ErrorCode::kInvalidArgument, "{}.type must be {} in a {} message, not {}", pat, expected, role,
                          short_quote(t));
      }
      HEARTH_RETURN_IF_ERROR(only_keys(p, pat, {"type", "text", "annotations", "logprobs"}));
      if (const json::value* a = field(p, "annotations"); a != nullptr && !(a->is_array() && a->as_array().empty())) {
        return unsupported(pat + ".annotations", "hearth makes no annotations to send back");
      }
      const json::value* tx = field(p, "text");
      if (tx == nullptr || !tx->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.text is required: a string", pat);
      if (j > 0) text += '\n';
      text.append(tx->as_string().data(), tx->as_string().size());
    }
    return text;
  }

  // The reasoning items before an assistant turn become its reasoning_content.
  void take_reasoning() {
    if (reasoning_.empty()) return;
    req_.messages.back().extra["reasoning_content"] = reasoning_;
    reasoning_.clear();
  }

  ApiRequest& req_;
  std::map<std::string, std::string> names_;  // call_id -> function name
  std::string reasoning_;                     // reasoning items not yet given to a turn
};

// text: {format: {type: text | json_object | json_schema, ...}}.
Status parse_text(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "text");
  if (v == nullptr) return Status::ok();
  if (!v->is_object()) return wrong_type("text", "an object", *v);
  HEARTH_RETURN_IF_ERROR(only_keys(v->as_object(), "text", {"format", "verbosity"}));
  if (const json::value* verbosity = field(v->as_object(), "verbosity"); verbosity != nullptr) {
    if (!(verbosity->is_string() && verbosity->as_string() == "medium")) {
      return unsupported("text.verbosity other than medium", "the model's length is set by max_output_tokens");
    }
  }
  const json::value* f = field(v->as_object(), "format");
  if (f == nullptr) return Status::ok();
  if (!f->is_object()) return wrong_type("text.format", "an object", *f);
  const json::object& fo = f->as_object();
  const json::value* type = field(fo, "type");
  if (type == nullptr || !type->is_string()) {
    return make_error(ErrorCode::kInvalidArgument, "text.format.type is required: text, json_object or json_schema");
  }
  const std::string_view t(type->as_string().data(), type->as_string().size());
  if (t == "text") return only_keys(fo, "text.format", {"type"});
  if (t == "json_object") {
    HEARTH_RETURN_IF_ERROR(only_keys(fo, "text.format", {"type"}));
    return set_constraint(req, {.kind = ApiConstraint::Kind::kJsonObject, .param = "text.format"});
  }
  if (t != "json_schema") {
    return make_error(ErrorCode::kInvalidArgument, "text.format.type must be text, json_object or json_schema, not {}",
                      short_quote(t));
  }
  HEARTH_RETURN_IF_ERROR(only_keys(fo, "text.format", {"type", "name", "schema", "strict", "description"}));
  const json::value* name = field(fo, "name");
  if (name == nullptr || !name->is_string()) {
    return make_error(ErrorCode::kInvalidArgument, "text.format.name is required: a string");
  }
  if (const json::value* d = field(fo, "description"); d != nullptr && !d->is_string()) {
    return wrong_type("text.format.description", "a string", *d);
  }
  if (const json::value* s = field(fo, "strict"); s != nullptr && !s->is_bool()) {
    return wrong_type("text.format.strict", "true or false", *s);
  }
  const json::value* schema = field(fo, "schema");
  if (schema == nullptr) return make_error(ErrorCode::kInvalidArgument, "text.format.schema is required");
  if (!schema->is_object() && !schema->is_bool()) return wrong_type("text.format.schema", "a JSON schema object", *schema);
  return set_constraint(req, {.kind = ApiConstraint::Kind::kJsonSchema, .schema = *schema, .param = "text.format"});
}

// reasoning: {"effort": "none"} turns the template's thinking off (enable_thinking);
// hearth does not grade effort otherwise, nor write summaries.
Status parse_reasoning(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "reasoning");
  if (v == nullptr) return Status::ok();
  if (!v->is_object()) return wrong_type("reasoning", "an object", *v);
  HEARTH_RETURN_IF_ERROR(only_keys(v->as_object(), "reasoning", {"effort", "summary"}));
  if (field(v->as_object(), "summary") != nullptr) {
    return unsupported("reasoning.summary", "the reasoning comes back whole, as reasoning_text");
  }
  if (const json::value* e = field(v->as_object(), "effort"); e != nullptr) {
    if (!(e->is_string() && e->as_string() == "none")) {
      return unsupported("reasoning.effort other than none",
                         "the model reasons as its template lets it; none turns thinking off");
    }
    req.template_kwargs["enable_thinking"] = false;
  }
  return Status::ok();
}

Status check_fields(const json::object& obj, const ApiParseOptions& options, ApiRequest& req) {
  for (const auto& kv : obj) {
    const std::string_view name(kv.key().data(), kv.key().size());
    if (std::find(kResponsesFields.begin(), kResponsesFields.end(), name) != kResponsesFields.end()) continue;
    if (std::find(kRefusedFields.begin(), kRefusedFields.end(), name) != kRefusedFields.end()) {
      HEARTH_RETURN_IF_ERROR(check_refused(name, kv.value()));
      continue;
    }
    HEARTH_RETURN_IF_ERROR(unknown_field_of(name, "/v1/responses", options, req.ignored_fields));
  }
  if (const json::value* s = field(obj, "store"); s != nullptr) {
    if (!s->is_bool()) return wrong_type("store", "true or false", *s);
    if (s->as_bool()) return unsupported("store true", "hearth keeps no responses (send store: false)");
  }
  if (const json::value* t = field(obj, "truncation"); t != nullptr) {
    if (!(t->is_string() && t->as_string() == "disabled")) {
      return unsupported("truncation other than disabled", "a prompt longer than the context is refused, not cut");
    }
  }
  if (const json::value* t = field(obj, "service_tier"); t != nullptr) {
    if (!(t->is_string() && (t->as_string() == "auto" || t->as_string() == "default"))) {
      return unsupported("service_tier other than auto or default", "hearth has one tier");
    }
  }
  if (const json::value* m = field(obj, "metadata"); m != nullptr) {
    if (!m->is_object()) return wrong_type("metadata", "an object of strings", *m);
    for (const auto& kv : m->as_object()) {
      if (!kv.value().is_string()) return wrong_type(fmt::format("metadata.{}", std::string_view(kv.key())), "a string", kv.value());
    }
  }
  for (const char* id : {"safety_identifier", "prompt_cache_key"}) HEARTH_RETURN_IF_ERROR(opt_string(obj, id).status());
  return parse_reasoning(obj, req);
}

// The settings the response object reports back: those given, else their defaults.
json::object settings_of(const json::object& obj, const ApiRequest& req) {
  auto given = [&](std::string_view key, json::value fallback) {
    const json::value* v = field(obj, key);
    return v != nullptr ? *v : fallback;
  };
  json::object e;
  e["instructions"] = given("instructions", nullptr);
  e["max_output_tokens"] = given("max_output_tokens", nullptr);
  e["temperature"] = given("temperature", 1.0);
  e["top_p"] = given("top_p", 1.0);
  e["tools"] = given("tools", json::array());
  e["tool_choice"] = given("tool_choice", "auto");
  e["parallel_tool_calls"] = req.parallel_tool_calls;
  e["text"] = given("text", json::object{{"format", json::object{{"type", "text"}}}});
  e["metadata"] = given("metadata", json::object());
  e["user"] = given("user", nullptr);
  e["truncation"] = "disabled";
  e["store"] = false;
  e["background"] = false;
  e["previous_response_id"] = nullptr;
  e["reasoning"] = nullptr;
  e["service_tier"] = "default";
  return e;
}

// ---- the answer ------------------------------------------------------------------------

std::string item_id(std::string_view prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}{:016x}{:016x}", prefix, rng(), rng());
}

json::object usage_of(const ApiUsage& u) {
  return json::object{{"input_tokens", u.prompt_tokens},
                      {"input_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}},
                      {"output_tokens", u.completion_tokens},
                      {"output_tokens_details", json::object{{"reasoning_tokens", u.reasoning_tokens}}},
                      {"total_tokens", static_cast<int64_t>(u.prompt_tokens) + u.completion_tokens}};
}

json::object message_item(std::string_view id, std::string_view text, std::string_view status) {
  json::array content;
  if (status != "in_progress") {
    content.push_back(json::object{{"type", "output_text"}, {"text", jstr(text)}, {"annotations", json::array()},
                                   {"logprobs", json::array()}});
  }
  return json::object{{"type", "message"}, {"id", jstr(id)}, {"status", jstr(status)}, {"role", "assistant"},
                      {"content", std::move(content)}};
}

json::object reasoning_item(std::string_view id, std::string_view text, bool done) {
  json::array content;
  if (done) content.push_back(json::object{{"type", "reasoning_text"}, {"text", jstr(text)}});
  return json::object{{"type", "reasoning"}, {"id", jstr(id)}, {"summary", json::array()}, {"content", std::move(content)}};
}

json::object call_item(std::string_view id, const ApiToolCall& call, std::string_view status) {
  return json::object{{"type", "function_call"},
                      {"id", jstr(id)},
                      {"call_id", jstr(call.id)},
                      {"name", jstr(call.name)},
                      {"arguments", status == "in_progress" ? json::string() : jstr(call.arguments)},
                      {"status", jstr(status)}};
}

// The response object: `status` in_progress, completed or incomplete.
json::object response_object(const json::object& settings, const ApiResponseHead& head, std::string_view status,
                             json::array output, const ApiUsage* usage) {
  json::object o{{"id", jstr(head.id)},       {"object", "response"},          {"created_at", head.created},
                 {"status", jstr(status)},    {"error", nullptr},              {"incomplete_details", nullptr},
                 {"model", jstr(head.model)}, {"output", std::move(output)}};
  if (status == "incomplete") o["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
  for (const auto& kv : settings) o[kv.key()] = kv.value();
  o["usage"] = usage != nullptr ? json::value(usage_of(*usage)) : json::value(nullptr);
  return o;
}

std::string_view final_status(const DialectResult& r) { return r.finish_reason == "length" ? "incomplete" : "completed"; }

class ResponsesStream final : public EventStream {
 public:
  ResponsesStream(const ApiRequest& request, const ApiResponseHead& head) : settings_(request.settings), head_(head) {}

  std::string reasoning(std::string_view delta) override {
    std::string out = start();
    if (delta.empty()) return out;
    if (!reasoning_open_) {
      out += close_message("completed");
      reasoning_id_ = item_id("rs_");
      reasoning_open_ = true;
      out += event("response.output_item.added",
                   {{"output_index", index()}, {"item", reasoning_item(reasoning_id_, "", false)}});
    }
    reasoning_text_ += delta;
    out += event("response.reasoning_text.delta",
                 {{"item_id", jstr(reasoning_id_)}, {"output_index", index()}, {"content_index", 0}, {"delta", jstr(delta)}});
    return out;
  }

  std::string text(std::string_view delta) override {
    std::string out = start();
    if (delta.empty()) return out;
    out += close_reasoning();
    if (!message_open_) {
      message_id_ = item_id("msg_");
      message_open_ = true;
      out += event("response.output_item.added",
                   {{"output_index", index()}, {"item", message_item(message_id_, "", "in_progress")}});
      out += event("response.content_part.added",
                   {{"item_id", jstr(message_id_)},
                    {"output_index", index()},
                    {"content_index", 0},
                    {"part", json::object{{"type", "output_text"}, {"text", ""}, {"annotations", json::array()},
                                          {"logprobs", json::array()}}}});
    }
    text_ += delta;
    out += event("response.output_text.delta", {{"item_id", jstr(message_id_)},
                                                {"output_index", index()},
                                                {"content_index", 0},
                                                {"delta", jstr(delta)},
                                                {"logprobs", json::array()}});
    return out;
  }

  std::string tool_calls(const std::vector<ApiToolCall>& calls) override {
    std::string out = start() + close_reasoning() + close_message("completed");
    for (const ApiToolCall& call : calls) {
      const std::string id = item_id("fc_");
      out += event("response.output_item.added", {{"output_index", index()}, {"item", call_item(id, call, "in_progress")}});
      out += event("response.function_call_arguments.delta",
                   {{"item_id", jstr(id)}, {"output_index", index()}, {"delta", jstr(call.arguments)}});
      out += event("response.function_call_arguments.done", {{"item_id", jstr(id)},
                                                             {"output_index", index()},
                                                             {"name", jstr(call.name)},
                                                             {"arguments", jstr(call.arguments)}});
      json::object done = call_item(id, call, "completed");
      out += event("response.output_item.done", {{"output_index", index()}, {"item", done}});
      output_.push_back(std::move(done));
    }
    return out;
  }

  std::string finish(const DialectResult& r) override {
    const std::string_view status = final_status(r);
    std::string out = start() + close_reasoning() + close_message(status);
    out += event(status == "completed" ? "response.completed" : "response.incomplete",
                 {{"response", response_object(settings_, head_, status, output_, &r.usage)}});
    return out;
  }

  std::string error(const Status& status) override {
    const json::value body = json::parse(api_error_body(status));
    const json::object& e = body.as_object().at("error").as_object();
    return event("error", {{"code", e.at("code")}, {"message", e.at("message")}, {"param", e.at("param")}});
  }

 private:
  int64_t index() const { return static_cast<int64_t>(output_.size()); }

  std::string event(std::string_view type, json::object data) {
    json::object o{{"type", jstr(type)}, {"sequence_number", sequence_++}};
    for (auto& kv : data) o[kv.key()] = std::move(kv.value());
    return fmt::format("event: {}\ndata: {}\n\n", type, json::serialize(o));
  }

  std::string start() {
    if (started_) return {};
    started_ = true;
    std::string out = event("response.created", {{"response", response_object(settings_, head_, "in_progress", {}, nullptr)}});
    out += event("response.in_progress", {{"response", response_object(settings_, head_, "in_progress", {}, nullptr)}});
    return out;
  }

  std::string close_reasoning() {
    if (!reasoning_open_) return {};
    reasoning_open_ = false;
    std::string out = event("response.reasoning_text.done", {{"item_id", jstr(reasoning_id_)},
                                                             {"output_index", index()},
                                                             {"content_index", 0},
                                                             {"text", jstr(reasoning_text_)}});
    json::object done = reasoning_item(reasoning_id_, reasoning_text_, true);
    out += event("response.output_item.done", {{"output_index", index()}, {"item", done}});
    output_.push_back(std::move(done));
    reasoning_text_.clear();
    return out;
  }

  std::string close_message(std::string_view status) {
    if (!message_open_) return {};
    message_open_ = false;
    std::string out = event("response.output_text.done", {{"item_id", jstr(message_id_)},
                                                          {"output_index", index()},
                                                          {"content_index", 0},
                                                          {"text", jstr(text_)},
                                                          {"logprobs", json::array()}});
    out += event("response.content_part.done",
                 {{"item_id", jstr(message_id_)},
                  {"output_index", index()},
                  {"content_index", 0},
                  {"part", json::object{{"type", "output_text"}, {"text", jstr(text_)}, {"annotations", json::array()},
                                        {"logprobs", json::array()}}}});
    json::object done = message_item(message_id_, text_, status);
    out += event("response.output_item.done", {{"output_index", index()}, {"item", done}});
    output_.push_back(std::move(done));
    text_.clear();
    return out;
  }

  json::object settings_;  // what the response object reports of the request
  ApiResponseHead head_;
  int64_t sequence_ = 0;
  bool started_ = false;
  bool reasoning_open_ = false;
  std::string reasoning_id_;
  std::string reasoning_text_;  // of the open reasoning item
  bool message_open_ = false;
  std::string message_id_;
  std::string text_;   // of the open message
  json::array output_;  // the items done
};

}  // namespace

bool request_json::responses_is_field(std::string_view name) {
  return std::find(kResponsesFields.begin(), kResponsesFields.end(), name) != kResponsesFields.end() ||
         std::find(kRefusedFields.begin(), kRefusedFields.end(), name) != kRefusedFields.end() ||
         name == "max_output_tokens";
}

Result<ApiRequest> responses_parse_request(std::string_view body, const ApiParseOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const json::value doc, json_parse(body, "request body", kMaxRequestDepth));
  if (!doc.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the request body must be a JSON object, not {}", kind_of(doc));
  }
  const json::object& obj = doc.as_object();
  ApiRequest req;
  req.endpoint = ApiEndpoint::kResponses;
  HEARTH_RETURN_IF_ERROR(check_fields(obj, options, req));
  HEARTH_ASSIGN_OR_RETURN(const auto model, opt_string(obj, "model"));
  req.model = model.value_or("");
  ResponsesParser parser(req);
  HEARTH_RETURN_IF_ERROR(parser.parse_input(obj));
  HEARTH_RETURN_IF_ERROR(parse_text(obj, req));
  HEARTH_RETURN_IF_ERROR(parser.parse_tools(obj));
  HEARTH_RETURN_IF_ERROR(tool_choice_constraint_check(req));
  HEARTH_ASSIGN_OR_RETURN(const auto max_tokens, opt_integer_in(obj, "max_output_tokens", 1, kInt32Max));
  if (max_tokens) req.max_tokens = static_cast<int32_t>(*max_tokens);
  HEARTH_RETURN_IF_ERROR(read_float(obj, kTemperatureRange, req.sampling.temperature));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kTopPRange, req.sampling.top_p));
  HEARTH_RETURN_IF_ERROR(read_bool(obj, "stream", req.stream));
  HEARTH_ASSIGN_OR_RETURN(req.user, opt_string(obj, "user"));
  req.settings = settings_of(obj, req);
  return req;
}

namespace dialect_detail {

std::string responses_body(const ApiRequest& request, const ApiResponseHead& head, const DialectResult& r) {
  const std::string_view status = final_status(r);
  json::array output;
  if (!r.reasoning.empty()) output.push_back(reasoning_item(item_id("rs_"), r.reasoning, true));
  if (!r.text.empty() || r.calls.empty()) output.push_back(message_item(item_id("msg_"), r.text, status));
  for (const ApiToolCall& call : r.calls) output.push_back(call_item(item_id("fc_"), call, "completed"));
  return json::serialize(response_object(request.settings, head, status, std::move(output), &r.usage));
}

std::unique_ptr<EventStream> responses_stream(const ApiRequest& request, const ApiResponseHead& head) {
  return std::make_unique<ResponsesStream>(request, head);
}

}  // namespace dialect_detail
}  // namespace hearth
