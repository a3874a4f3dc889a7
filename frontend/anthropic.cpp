// Anthropic's Messages API: POST /v1/messages and /v1/messages/count_tokens parsed into
// an ApiRequest (endpoint kMessages), and the answer as a message body or Anthropic's
// event stream (message_start, content_block_start / _delta / _stop, message_delta,
// message_stop).
//
// Content blocks map onto the chat template's messages: text blocks are a message's
// content (joined by newlines); an assistant's tool_use blocks are its tool_calls (input
// as arguments); a user's tool_result blocks are tool messages (tool_call_id, and the
// name of the tool_use they answer), each before the user's text. A tool_result with
// is_error reads "Error: " before its content, since templates have no such flag; an
// assistant's thinking blocks are its reasoning_content. With a reasoning parser the
// answer's reasoning comes back as a thinking block (its signature empty: nothing here
// checks one). A final assistant message is a prefill: its text follows the template's
// generation prompt and the answer continues it (ApiRequest::prefill).
#include <algorithm>
#include <array>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "common/json.h"
#include "common/utf8.h"
#include "frontend/dialect_detail.h"
#include "frontend/request_json.h"

namespace hearth {
namespace {

using namespace request_json;

constexpr size_t kMaxRequestDepth = 32;
// Anthropic documents no limit; each one is matched on every token of the output.
constexpr size_t kMaxStopSequences = 16;
constexpr SamplingRange kMessagesTemperatureRange{"temperature", 0.0, false, 1.0};

constexpr std::array<std::string_view, 13> kMessagesFields = {
    "model",    "messages", "max_tokens", "system",   "stop_sequences", "stream",      "temperature",
    "top_p",    "top_k",    "tools",      "tool_choice", "metadata",    "thinking",
};
constexpr std::array<std::string_view, 6> kCountTokensFields = {"model", "messages", "system",
                                                                "tools", "tool_choice", "thinking"};
// Fields of the schema hearth does not serve: a 400 naming them (service_tier only for
// values other than auto and standard_only, which ask for nothing).
constexpr std::array<std::string_view, 5> kRefusedFields = {"service_tier", "container", "mcp_servers",
                                                            "context_management", "inference_geo"};

// cache_control marks where Anthropic's prompt cache should end; hearth's prefix cache
// keeps every prompt's blocks without being asked, so the hint is honoured as it is.
Status check_cache_control(const json::object& block, const std::string& at) {
  const json::value* cc = field(block, "cache_control");
  if (cc == nullptr) return Status::ok();
  if (!cc->is_object()) return wrong_type(at + ".cache_control", "an object", *cc);
  const json::value* type = field(cc->as_object(), "type");
  if (type == nullptr || !type->is_string() || type->as_string() != "ephemeral") {
    return make_error(ErrorCode::kInvalidArgument, "{}.cache_control.type must be \"ephemeral\"", at);
  }
  return only_keys(cc->as_object(), at + ".cache_control", {"type", "ttl"});
}

Result<const json::object*> block_at(const json::value& v, const std::string& at, std::string& type) {
  if (!v.is_object()) return wrong_type(at, "an object", v);
  const json::value* t = field(v.as_object(), "type");
  if (t == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.type is required", at);
  if (!t->is_string()) return wrong_type(at + ".type", "a string", *t);
  type = std::string(t->as_string());
  return &v.as_object();
}

// A text block's text.
Result<std::string> text_block(const json::object& b, const std::string& at) {
  HEARTH_RETURN_IF_ERROR(only_keys(b, at, {"type", "text", "cache_control", "citations"}));
  if (const json::value* c = field(b, "citations"); c != nullptr && !(c->is_array() && c->as_array().empty())) {
    return unsupported(at + ".citations", "hearth does not cite documents");
  }
  HEARTH_RETURN_IF_ERROR(check_cache_control(b, at));
  const json::value* t = field(b, "text");
  if (t == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.text is required", at);
  if (!t->is_string()) return wrong_type(at + ".text", "a string", *t);
  return std::string(t->as_string());
}

Status refuse_block(std::string_view type, const std::string& at) {
  if (type == "image" || type == "document" || type == "search_result") {
    return unsupported(fmt::format("{}.type {}", at, type), "hearth serves text models; send text blocks");
  }
  if (type == "redacted_thinking") {
    return unsupported(fmt::format("{}.type {}", at, type), "this server redacts no thinking to send back");
  }
  if (type == "server_tool_use" || type == "web_search_tool_result" || type == "web_fetch_tool_result" ||
      type == "code_execution_tool_result" || type == "mcp_tool_use" || type == "mcp_tool_result" ||
      type == "container_upload") {
    return unsupported(fmt::format("{}.type {}", at, type), "hearth runs no server tools");
  }
  return make_error(ErrorCode::kInvalidArgument, "{}.type must be text, tool_use or tool_result, not {}", at,
                    short_quote(type));
}

// A tool_result's content: a string, or text blocks.
Result<std::string> tool_result_content(const json::object& b, const std::string& at) {
  const json::value* c = field(b, "content");
  if (c == nullptr) return std::string();
  if (c->is_string()) return std::string(c->as_string());
  if (!c->is_array()) return wrong_type(at + ".content", "a string or an array of text blocks", *c);
  std::string text;
  for (size_t k = 0; k < c->as_array().size(); ++k) {
    const std::string bat = fmt::format("{}.content[{}]", at, k);
    std::string type;
    HEARTH_ASSIGN_OR_RETURN(const json::object* inner, block_at(c->as_array()[k], bat, type));
    if (type != "text") return refuse_block(type, bat);
    HEARTH_ASSIGN_OR_RETURN(std::string t, text_block(*inner, bat));
    if (k > 0) text += '\n';
    text += t;
  }
  return text;
}

class MessagesParser {
 public:
  MessagesParser(ApiRequest& req) : req_(req) {}

  Status parse_system(const json::object& obj) {
    const json::value* v = field(obj, "system");
    if (v == nullptr) return Status::ok();
    std::string text;
    if (v->is_string()) {
      text = std::string(v->as_string());
    } else if (v->is_array()) {
      for (size_t i = 0; i < v->as_array().size(); ++i) {
        const std::string at = fmt::format("system[{}]", i);
        std::string type;
        HEARTH_ASSIGN_OR_RETURN(const json::object* b, block_at(v->as_array()[i], at, type));
        if (type != "text") {
          return make_error(ErrorCode::kInvalidArgument, "{}.type must be text, not {}", at, short_quote(type));
        }
        HEARTH_ASSIGN_OR_RETURN(std::string t, text_block(*b, at));
        if (i > 0) text += '\n';
        text += t;
      }
    } else {
      return wrong_type("system", "a string or an array of text blocks", *v);
    }
    req_.messages.push_back(ApiMessage{"system", std::move(text), {}});
    return Status::ok();
  }

  Status parse_messages(const json::object& obj) {
    const json::value* v = field(obj, "messages");
    if (v == nullptr) return make_error(ErrorCode::kInvalidArgument, "messages is required");
    if (!v->is_array()) return wrong_type("messages", "an array of messages", *v);
    const json::array& arr = v->as_array();
    if (arr.empty()) return make_error(ErrorCode::kInvalidArgument, "messages must hold at least one message");
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string path = fmt::format("messages[{}]", i);
      if (!arr[i].is_object()) return wrong_type(path, "an object", arr[i]);
      const json::object& msg = arr[i].as_object();
      HEARTH_RETURN_IF_ERROR(only_keys(msg, path, {"role", "content"}));
      const json::value* role_v = field(msg, "role");
      if (role_v == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.role is required", path);
      if (!role_v->is_string()) return wrong_type(path + ".role", "a string", *role_v);
      const std::string role(role_v->as_string());
      if (role != "user" && role != "assistant") {
        return make_error(ErrorCode::kInvalidArgument,
                          "{}.role must be user or assistant, not {} (the system prompt is the system field)", path,
                          short_quote(role));
      }
      const json::value* content = field(msg, "content");
      if (content == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.content is required", path);
      if (content->is_string()) {
        req_.messages.push_back(ApiMessage{role, std::string(content->as_string()), {}});
      } else if (content->is_array()) {
        HEARTH_RETURN_IF_ERROR(role == "user" ? user_blocks(content->as_array(), path)
                                              : assistant_blocks(content->as_array(), path));
      } else {
        return wrong_type(path + ".content", "a string or an array of content blocks", *content);
      }
    }
    if (req_.messages.back().role == "assistant") {  // a prefill: the answer continues it
      const ApiMessage& last = req_.messages.back();
      if (!last.extra.empty()) {
        return unsupported("messages: a final assistant message with tool_use or thinking blocks",
                           "a prefill continues the answer's text");
      }
      if (!last.content.empty() && std::isspace(static_cast<unsigned char>(last.content.back()))) {
        return make_error(ErrorCode::kInvalidArgument,
                          "messages: final assistant content cannot end with trailing whitespace");
      }
      req_.prefill = last.content;
      req_.messages.pop_back();
      if (req_.messages.empty()) {
        return make_error(ErrorCode::kInvalidArgument, "messages: a prefill needs a user message before it");
      }
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
        if (const json::value* type = field(o, "type"); type != nullptr) {
          if (!type->is_string()) return wrong_type(at + ".type", "a string", *type);
          if (type->as_string() != "custom") {
            return unsupported(fmt::format("{}.type {}", at, short_quote(std::string_view(type->as_string()))),
                               "hearth runs no server tools; define client tools with name and input_schema");
          }
        }
        HEARTH_RETURN_IF_ERROR(only_keys(o, at, {"type", "name", "description", "input_schema", "cache_control"}));
        HEARTH_RETURN_IF_ERROR(check_cache_control(o, at));
        HEARTH_ASSIGN_OR_RETURN(ApiTool tool, flat_function_tool(o, at, "input_schema", /*schema_required=*/true));
        HEARTH_RETURN_IF_ERROR(add_tool(req_, std::move(tool)));
      }
    }
    req_.tool_choice = req_.tools.empty() ? ApiToolChoice::kNone : ApiToolChoice::kAuto;
    const json::value* c = field(obj, "tool_choice");
    if (c == nullptr) return Status::ok();
    if (!c->is_object()) return wrong_type("tool_choice", "an object with a type", *c);
    const json::object& choice = c->as_object();
    const json::value* type = field(choice, "type");
    if (type == nullptr || !type->is_string()) {
      return make_error(ErrorCode::kInvalidArgument, "tool_choice.type is required: auto, any, tool or none");
    }
    const std::string_view t(type->as_string().data(), type->as_string().size());
    HEARTH_RETURN_IF_ERROR(only_keys(choice, "tool_choice", {"type", "name", "disable_parallel_tool_use"}));
    if (const json::value* d = field(choice, "disable_parallel_tool_use"); d != nullptr) {
      if (!d->is_bool()) return wrong_type("tool_choice.disable_parallel_tool_use", "true or false", *d);
      req_.parallel_tool_calls = !d->as_bool();
    }
    if (t == "auto") {
      req_.tool_choice = req_.tools.empty() ? ApiToolChoice::kNone : ApiToolChoice::kAuto;
    } else if (t == "any") {
      req_.tool_choice = ApiToolChoice::kRequired;
    } else if (t == "none") {
      req_.tool_choice = ApiToolChoice::kNone;
    } else if (t == "tool") {
      const json::value* name = field(choice, "name");
      if (name == nullptr || !name->is_string()) {
        return make_error(ErrorCode::kInvalidArgument, "tool_choice.name is required for a tool_choice of type tool");
      }
      req_.tool_choice = ApiToolChoice::kNamed;
      req_.tool_choice_name = std::string(name->as_string());
    } else {
      return make_error(ErrorCode::kInvalidArgument, "tool_choice.type must be auto, any, tool or none, not {}",
                        short_quote(t));
    }
    if (t != "tool" && field(choice, "name") != nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "tool_choice.name belongs to a tool_choice of type tool only");
    }
    return tool_choice_check(req_);
  }

 private:
  // A user's blocks: tool_result blocks become tool messages, text blocks the user's message.
  Status user_blocks(const json::array& blocks, const std::string& path) {
    std::string text;
    bool has_text = false;
    auto flush = [&] {
      if (has_text) req_.messages.push_back(ApiMessage{"user", std::move(text), {}});
      text.clear();
      has_text = false;
    };
    for (size_t j = 0; j < blocks.size(); ++j) {
      const std::string at = fmt::format("{}.content[{}]", path, j);
      std::string type;
      HEARTH_ASSIGN_OR_RETURN(const json::object* b, block_at(blocks[j], at, type));
      if (type == "text") {
        HEARTH_ASSIGN_OR_RETURN(std::string t, text_block(*b, at));
        if (has_text) text += '\n';
        text += t;
        has_text = true;
      } else if (type == "tool_result") {
        HEARTH_RETURN_IF_ERROR(only_keys(*b, at, {"type", "tool_use_id", "content", "is_error", "cache_control"}));
        HEARTH_RETURN_IF_ERROR(check_cache_control(*b, at));
        const json::value* id = field(*b, "tool_use_id");
        if (id == nullptr || !id->is_string()) {
          return make_error(ErrorCode::kInvalidArgument, "{}.tool_use_id is required: a string", at);
        }
        HEARTH_ASSIGN_OR_RETURN(std::string content, tool_result_content(*b, at));
        if (const json::value* e = field(*b, "is_error"); e != nullptr) {
          if (!e->is_bool()) return wrong_type(at + ".is_error", "true or false", *e);
          if (e->as_bool()) content = "Error: " + content;
        }
        flush();
        json::object extra{{"tool_call_id", *id}};
        const auto named = tool_names_.find(std::string(id->as_string()));
        if (named != tool_names_.end()) extra["name"] = named->second;
        req_.messages.push_back(ApiMessage{"tool", std::move(content), std::move(extra)});
      } else if (type == "tool_use" || type == "thinking") {
        return make_error(ErrorCode::kInvalidArgument, "{}: {} blocks belong to assistant messages", at, type);
      } else {
        return refuse_block(type, at);
      }
    }
    flush();
    if (blocks.empty()) req_.messages.push_back(ApiMessage{"user", "", {}});
    return Status::ok();
  }

  // An assistant's blocks: its text and its tool calls, one message.
  Status assistant_blocks(const json::array& blocks, const std::string& path) {
    ApiMessage m{"assistant", "", {}};
    json::array calls;
    bool has_text = false;
    for (size_t j = 0; j < blocks.size(); ++j) {
      const std::string at = fmt::format("{}.content[{}]", path, j);
      std::string type;
      HEARTH_ASSIGN_OR_RETURN(const json::object* b, block_at(blocks[j], at, type));
      if (type == "text") {
        HEARTH_ASSIGN_OR_RETURN(std::string t, text_block(*b, at));
        if (has_text) m.content += '\n';
        m.content += t;
        has_text = true;
      } else if (type == "tool_use") {
        HEARTH_RETURN_IF_ERROR(only_keys(*b, at, {"type", "id", "name", "input", "cache_control"}));
        HEARTH_RETURN_IF_ERROR(check_cache_control(*b, at));
        const json::value* id = field(*b, "id");
        const json::value* name = field(*b, "name");
        const json::value* input = field(*b, "input");
        if (id == nullptr || !id->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.id is required: a string", at);
        if (name == nullptr || !name->is_string()) {
          return make_error(ErrorCode::kInvalidArgument, "{}.name is required: a string", at);
        }
        if (input == nullptr || !input->is_object()) {
          return make_error(ErrorCode::kInvalidArgument, "{}.input is required: an object", at);
        }
        tool_names_[std::string(id->as_string())] = std::string(name->as_string());
        calls.push_back(json::object{{"id", *id},
                                     {"type", "function"},
                                     {"function", json::object{{"name", *name}, {"arguments", *input}}}});
      } else if (type == "tool_result") {
        return make_error(ErrorCode::kInvalidArgument, "{}: tool_result blocks belong to user messages", at);
      } else if (type == "thinking") {
        // Past reasoning: templates that show it read reasoning_content (most drop it).
        HEARTH_RETURN_IF_ERROR(only_keys(*b, at, {"type", "thinking", "signature"}));
        const json::value* t = field(*b, "thinking");
        if (t == nullptr || !t->is_string()) {
          return make_error(ErrorCode::kInvalidArgument, "{}.thinking is required: a string", at);
        }
        std::string thought = m.extra.contains("reasoning_content")
                                  ? std::string(m.extra["reasoning_content"].as_string()) + "\n"
                                  : std::string();
        thought.append(t->as_string().data(), t->as_string().size());
        m.extra["reasoning_content"] = thought;
      } else {
        return refuse_block(type, at);
      }
    }
    if (!calls.empty()) m.extra["tool_calls"] = std::move(calls);
    req_.messages.push_back(std::move(m));
    return Status::ok();
  }

  ApiRequest& req_;
  std::map<std::string, std::string> tool_names_;  // tool_use id -> the tool's name
};

Status parse_stop_sequences(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "stop_sequences");
  if (v == nullptr) return Status::ok();
  if (!v->is_array()) return wrong_type("stop_sequences", "an array of strings", *v);
  if (v->as_array().size() > kMaxStopSequences) {
    return make_error(ErrorCode::kInvalidArgument, "stop_sequences may hold at most {} strings, not {}",
                      kMaxStopSequences, v->as_array().size());
  }
  for (size_t i = 0; i < v->as_array().size(); ++i) {
    const json::value& s = v->as_array()[i];
    if (!s.is_string()) return wrong_type(fmt::format("stop_sequences[{}]", i), "a string", s);
    if (s.as_string().empty()) {
      return make_error(ErrorCode::kInvalidArgument, "stop_sequences[{}] must not be empty", i);
    }
    req.stop.emplace_back(s.as_string());
  }
  return Status::ok();
}

// thinking: {"type": "enabled", "budget_tokens": N} turns the template's thinking on
// (enable_thinking), returns it as thinking blocks and ends a choice that thinks longer
// than N tokens; {"type": "disabled"} turns it off.
Status parse_thinking(const json::object& obj, ApiRequest& req) {
  const json::value* v = field(obj, "thinking");
  if (v == nullptr) return Status::ok();
  if (!v->is_object()) return wrong_type("thinking", "an object", *v);
  const json::value* type = field(v->as_object(), "type");
  if (type == nullptr || !type->is_string()) {
    return make_error(ErrorCode::kInvalidArgument, "thinking.type is required: enabled or disabled");
  }
  if (type->as_string() == "disabled") {
    req.template_kwargs["enable_thinking"] = false;
    return only_keys(v->as_object(), "thinking", {"type"});
  }
  if (type->as_string() != "enabled") {
    return make_error(ErrorCode::kInvalidArgument, "thinking.type must be enabled or disabled, not {}",
                      short_quote(std::string_view(type->as_string())));
  }
  HEARTH_RETURN_IF_ERROR(only_keys(v->as_object(), "thinking", {"type", "budget_tokens"}));
  HEARTH_ASSIGN_OR_RETURN(const auto budget, opt_integer_in(v->as_object(), "budget_tokens", 1, kInt32Max));
  if (!budget) return make_error(ErrorCode::kInvalidArgument, "thinking.budget_tokens is required");
  req.template_kwargs["enable_thinking"] = true;
  req.reasoning_budget = static_cast<int32_t>(*budget);
  req.wants_reasoning = true;
  return Status::ok();
}

Status check_fields(const json::object& obj, bool count_tokens, const ApiParseOptions& options, ApiRequest& req) {
  for (const auto& kv : obj) {
    const std::string_view name(kv.key().data(), kv.key().size());
    const bool known = count_tokens
                           ? std::find(kCountTokensFields.begin(), kCountTokensFields.end(), name) != kCountTokensFields.end()
                           : std::find(kMessagesFields.begin(), kMessagesFields.end(), name) != kMessagesFields.end();
    if (known) continue;
    if (std::find(kRefusedFields.begin(), kRefusedFields.end(), name) != kRefusedFields.end()) {
      if (kv.value().is_null()) continue;
      if (name == "service_tier" && kv.value().is_string() &&
          (kv.value().as_string() == "auto" || kv.value().as_string() == "standard_only")) {
        continue;
      }
      return unsupported(name, name == "service_tier" ? "hearth has one tier (auto or standard_only)"
                                                       : "this server does not implement it");
    }
    HEARTH_RETURN_IF_ERROR(unknown_field_of(name, count_tokens ? "/v1/messages/count_tokens" : "/v1/messages",
                                            options, req.ignored_fields));
  }
  return Status::ok();
}

json::string jstr(std::string_view s) { return json::string(s.data(), s.size()); }

// Anthropic's stop_reason for a choice that ended so.
std::string_view stop_reason_of(const DialectResult& r) {
  if (r.finish_reason == "length") return "max_tokens";
  if (r.finish_reason == "tool_calls" || !r.calls.empty()) return "tool_use";
  if (!r.stop_sequence.empty()) return "stop_sequence";
  return "end_turn";
}

json::value stop_sequence_of(const DialectResult& r) {
  if (stop_reason_of(r) != "stop_sequence") return nullptr;
  return jstr(r.stop_sequence);
}

json::object tool_input(const ApiToolCall& call) {
  boost::system::error_code ec;
  json::value v = json::parse(call.arguments, ec);
  return !ec && v.is_object() ? std::move(v.as_object()) : json::object();  // the parser only yields objects
}

// Anthropic counts the prompt tokens read from its cache apart from input_tokens.
json::object usage_of(const ApiUsage& u) {
  return json::object{{"input_tokens", u.prompt_tokens - u.cached_tokens},
                      {"output_tokens", u.completion_tokens},
                      {"cache_read_input_tokens", u.cached_tokens},
                      {"cache_creation_input_tokens", 0}};
}

json::object message_head(const ApiResponseHead& head) {
  return json::object{{"id", jstr(head.id)}, {"type", "message"}, {"role", "assistant"}, {"model", jstr(head.model)}};
}

std::string event(std::string_view name, const json::object& data) {
  return fmt::format("event: {}\ndata: {}\n\n", name, json::serialize(data));
}

class MessagesStream final : public EventStream {
 public:
  explicit MessagesStream(const ApiResponseHead& head) : head_(head) {}

  std::string reasoning(std::string_view delta) override {
    if (delta.empty()) return start();
    return block_delta(Block::kThinking, json::object{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}},
                       json::object{{"type", "thinking_delta"}, {"thinking", jstr(delta)}});
  }

  std::string text(std::string_view delta) override {
    if (delta.empty()) return start();
    return block_delta(Block::kText, json::object{{"type", "text"}, {"text", ""}},
                       json::object{{"type", "text_delta"}, {"text", jstr(delta)}});
  }

  std::string tool_calls(const std::vector<ApiToolCall>& calls) override {
    std::string out = start() + close_block();
    for (const ApiToolCall& call : calls) {
      out += event("content_block_start",
                   json::object{{"type", "content_block_start"},
                                {"index", index_},
                                {"content_block", json::object{{"type", "tool_use"},
                                                               {"id", jstr(call.id)},
                                                               {"name", jstr(call.name)},
                                                               {"input", json::object()}}}});
      out += event("content_block_delta",
                   json::object{{"type", "content_block_delta"},
                                {"index", index_},
                                {"delta", json::object{{"type", "input_json_delta"},
                                                       {"partial_json", json::serialize(tool_input(call))}}}});
      out += event("content_block_stop", json::object{{"type", "content_block_stop"}, {"index", index_}});
      ++index_;
    }
    return out;
  }

  std::string finish(const DialectResult& r) override {
    std::string out = start() + close_block();
    json::object usage = usage_of(r.usage);
    out += event("message_delta",
                 json::object{{"type", "message_delta"},
                              {"delta", json::object{{"stop_reason", stop_reason_of(r)},
                                                     {"stop_sequence", stop_sequence_of(r)}}},
                              {"usage", std::move(usage)}});
    out += event("message_stop", json::object{{"type", "message_stop"}});
    return out;
  }

  std::string error(const Status& status) override {
    return event("error", json::parse(dialect_error_body(ApiEndpoint::kMessages, status)).as_object());
  }

 private:
  std::string start() {
    if (started_) return {};
    started_ = true;
    json::object message = message_head(head_);
    message["content"] = json::array();
    message["stop_reason"] = nullptr;
    message["stop_sequence"] = nullptr;
    message["usage"] = usage_of(usage_);
    return event("message_start", json::object{{"type", "message_start"}, {"message", std::move(message)}}) +
           event("ping", json::object{{"type", "ping"}});
  }

  enum class Block : uint8_t { kNone, kThinking, kText };

  // A delta of a block of `kind`, opening one (and closing the other) first.
  std::string block_delta(Block kind, json::object content_block, json::object delta) {
    std::string out = start();
    if (open_ != kind) {
      out += close_block();
      out += event("content_block_start", json::object{{"type", "content_block_start"},
                                                       {"index", index_},
                                                       {"content_block", std::move(content_block)}});
      open_ = kind;
    }
    out += event("content_block_delta",
                 json::object{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(delta)}});
    return out;
  }

  std::string close_block() {
    if (open_ == Block::kNone) return {};
    open_ = Block::kNone;
    return event("content_block_stop", json::object{{"type", "content_block_stop"}, {"index", index_++}});
  }

  ApiResponseHead head_;
  bool started_ = false;
  Block open_ = Block::kNone;
  int64_t index_ = 0;  // of the block open or next
};

}  // namespace

Result<ApiRequest> messages_parse_request(std::string_view body, bool count_tokens, const ApiParseOptions& options) {
  HEARTH_ASSIGN_OR_RETURN(const json::value doc, json_parse(body, "request body", kMaxRequestDepth));
  if (!doc.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "the request body must be a JSON object, not {}", kind_of(doc));
  }
  const json::object& obj = doc.as_object();
  ApiRequest req;
  req.endpoint = ApiEndpoint::kMessages;
  HEARTH_RETURN_IF_ERROR(check_fields(obj, count_tokens, options, req));
  HEARTH_ASSIGN_OR_RETURN(const auto model, opt_string(obj, "model"));
  req.model = model.value_or("");
  MessagesParser parser(req);
  HEARTH_RETURN_IF_ERROR(parser.parse_system(obj));
  HEARTH_RETURN_IF_ERROR(parser.parse_messages(obj));
  HEARTH_RETURN_IF_ERROR(parser.parse_tools(obj));
  HEARTH_RETURN_IF_ERROR(parse_thinking(obj, req));
  if (count_tokens) return req;
  HEARTH_ASSIGN_OR_RETURN(const auto max_tokens, opt_integer_in(obj, "max_tokens", 1, kInt32Max));
  if (!max_tokens) return make_error(ErrorCode::kInvalidArgument, "max_tokens is required");
  req.max_tokens = static_cast<int32_t>(*max_tokens);
  if (req.reasoning_budget && *req.reasoning_budget >= *req.max_tokens) {
    return make_error(ErrorCode::kInvalidArgument, "thinking.budget_tokens ({}) must be less than max_tokens ({})",
                      *req.reasoning_budget, *req.max_tokens);
  }
  HEARTH_RETURN_IF_ERROR(read_float(obj, kMessagesTemperatureRange, req.sampling.temperature));
  HEARTH_RETURN_IF_ERROR(read_float(obj, kTopPRange, req.sampling.top_p));
  HEARTH_ASSIGN_OR_RETURN(const auto top_k, opt_integer_in(obj, "top_k", 0, kInt32Max));
  if (top_k) req.sampling.top_k = static_cast<int32_t>(*top_k);
  HEARTH_RETURN_IF_ERROR(parse_stop_sequences(obj, req));
  HEARTH_RETURN_IF_ERROR(read_bool(obj, "stream", req.stream));
  if (const json::value* m = field(obj, "metadata"); m != nullptr) {
    if (!m->is_object()) return wrong_type("metadata", "an object", *m);
    HEARTH_RETURN_IF_ERROR(only_keys(m->as_object(), "metadata", {"user_id"}));
    HEARTH_ASSIGN_OR_RETURN(req.user, opt_string(m->as_object(), "user_id"));
  }
  return req;
}

std::string messages_count_tokens_body(int32_t input_tokens) {
  return json::serialize(json::object{{"input_tokens", input_tokens}});
}

namespace dialect_detail {

std::string messages_body(const ApiResponseHead& head, const DialectResult& r) {
  json::object body = message_head(head);
  json::array content;
  if (!r.reasoning.empty()) {
    content.push_back(json::object{{"type", "thinking"}, {"thinking", jstr(r.reasoning)}, {"signature", ""}});
  }
  if (!r.text.empty()) content.push_back(json::object{{"type", "text"}, {"text", jstr(r.text)}});
  for (const ApiToolCall& call : r.calls) {
    content.push_back(json::object{
        {"type", "tool_use"}, {"id", jstr(call.id)}, {"name", jstr(call.name)}, {"input", tool_input(call)}});
  }
  body["content"] = std::move(content);
  body["stop_reason"] = stop_reason_of(r);
  body["stop_sequence"] = stop_sequence_of(r);
  body["usage"] = usage_of(r.usage);
  return json::serialize(body);
}

std::unique_ptr<EventStream> messages_stream(const ApiResponseHead& head) {
  return std::make_unique<MessagesStream>(head);
}

// Anthropic's error types by HTTP status.
std::string messages_error(int http, std::string_view message) {
  std::string_view type = "api_error";
  switch (http) {
    case 400: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 503: type = "overloaded_error"; break;
    default: break;
  }
  return json::serialize(json::object{
      {"type", "error"}, {"error", json::object{{"type", type}, {"message", jstr(utf8_sanitize(message))}}}});
}

}  // namespace dialect_detail
}  // namespace hearth
