// The structured-output, tool and sampling extensions of an API request: response_format
// and vLLM's guided_* fields, tools and tool_choice, logit_bias, best_of, min_tokens,
// stop_token_ids.
#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "frontend/request_json.h"

namespace hearth::request_json {

Status set_constraint(ApiRequest& req, ApiConstraint c) {
  if (req.constraint) {
    return make_error(ErrorCode::kInvalidArgument, "{} cannot be given with {}: one constraint per request", c.param,
                      req.constraint->param);
  }
  req.constraint = std::move(c);
  return Status::ok();
}

namespace {

// OpenAI's response_format: text (no constraint), json_object, or json_schema.
Status parse_response_format(const json::value* v, ApiRequest& req) {
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
    return set_constraint(req, {.kind = ApiConstraint::Kind::kJsonObject, .param = "response_format"});
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
    return set_constraint(req, std::move(c));
  } else if (t != "text") {
    return make_error(ErrorCode::kInvalidArgument,
                      "response_format.type must be text, json_object or json_schema, not {}", short_quote(t));
  }
  return Status::ok();
}

}  // namespace

Status parse_constraint(const json::object& obj, ApiRequest& req) {
  if (const json::value* v = field(obj, "response_format"); v != nullptr) {
    HEARTH_RETURN_IF_ERROR(parse_response_format(v, req));
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
    HEARTH_RETURN_IF_ERROR(set_constraint(req, std::move(c)));
  }
  if (const json::value* v = field(obj, "guided_regex"); v != nullptr) {
    if (!v->is_string()) return wrong_type("guided_regex", "a string", *v);
    HEARTH_RETURN_IF_ERROR(
        set_constraint(req, {.kind = ApiConstraint::Kind::kRegex, .text = std::string(v->as_string()), .param = "guided_regex"}));
  }
  if (const json::value* v = field(obj, "guided_grammar"); v != nullptr) {
    if (!v->is_string()) return wrong_type("guided_grammar", "a string of GBNF", *v);
    HEARTH_RETURN_IF_ERROR(
        set_constraint(req, {.kind = ApiConstraint::Kind::kGrammar, .text = std::string(v->as_string()), .param = "guided_grammar"}));
  }
  if (const json::value* v = field(obj, "guided_choice"); v != nullptr) {
    if (!v->is_array() || v->as_array().empty()) return wrong_type("guided_choice", "a non-empty array of strings", *v);
    ApiConstraint c{.kind = ApiConstraint::Kind::kChoice, .param = "guided_choice"};
    for (const json::value& x : v->as_array()) {
      if (!x.is_string()) return wrong_type("guided_choice", "a non-empty array of strings", *v);
      c.choices.emplace_back(x.as_string());
    }
    HEARTH_RETURN_IF_ERROR(set_constraint(req, std::move(c)));
  }
  return Status::ok();
}

namespace {

// tool_choice: none, auto, required, or one function by name; it must name what tools defines.
Status parse_tool_choice(const json::value* c, ApiRequest& req) {
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
  return tool_choice_check(req);
}

}  // namespace

Status tool_choice_check(const ApiRequest& req) {
  if ((req.tool_choice == ApiToolChoice::kRequired || req.tool_choice == ApiToolChoice::kNamed) && req.tools.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "tool_choice asks for a tool call, but tools defines none");
  }
  if (req.tool_choice == ApiToolChoice::kNamed &&
      std::none_of(req.tools.begin(), req.tools.end(),
                   [&](const ApiTool& t) { return t.name == req.tool_choice_name; })) {
    return make_error(ErrorCode::kInvalidArgument, "tool_choice names the function {}, which tools does not define",
                      short_quote(req.tool_choice_name));
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
      tool.definition = t;
      HEARTH_RETURN_IF_ERROR(add_tool(req, std::move(tool)));
    }
  }
  if (!req.tools.empty()) req.tool_choice = ApiToolChoice::kAuto;
  if (const json::value* c = field(obj, "tool_choice"); c != nullptr) HEARTH_RETURN_IF_ERROR(parse_tool_choice(c, req));
  if (const json::value* p = field(obj, "parallel_tool_calls"); p != nullptr) {
    if (!p->is_bool()) return wrong_type("parallel_tool_calls", "true or false", *p);
    req.parallel_tool_calls = p->as_bool();
  }
  return tool_choice_constraint_check(req);
}

Status tool_choice_constraint_check(const ApiRequest& req) {
  if (req.constraint && (req.tool_choice == ApiToolChoice::kRequired || req.tool_choice == ApiToolChoice::kNamed)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "tool_choice cannot force a tool call together with {}: the output is one or the other",
                      req.constraint->param);
  }
  return Status::ok();
}

Status add_tool(ApiRequest& req, ApiTool tool) {
  for (const ApiTool& other : req.tools) {
    if (other.name == tool.name) {
      return make_error(ErrorCode::kInvalidArgument, "tools defines the function {} twice", tool.name);
    }
  }
  req.tools.push_back(std::move(tool));
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

}  // namespace hearth::request_json
