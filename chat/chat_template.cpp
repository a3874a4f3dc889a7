#include "chat/chat_template.h"

#include <utility>

#include "chat/jinja_interpreter.h"
#include "chat/jinja_parser.h"

namespace hearth {
namespace {

using jinja::Value;

void set_variable(std::vector<std::pair<std::string, Value>>& vars, std::string name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(std::move(name), std::move(value));
}

Result<Value> message_value(const ChatMessage& message) {
  jinja::DictObj d;
  d.set(Value::string("role"), Value::string(message.role));
  d.set(Value::string("content"), Value::string(message.content));
  for (const auto& kv : message.extra) {
    HEARTH_ASSIGN_OR_RETURN(Value v, Value::from_json(kv.value()));
    d.set(Value::string(std::string(kv.key())), std::move(v));
  }
  return Value::dict(std::move(d));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (source.size() > kMaxChatTemplateBytes) {
    return make_error(ErrorCode::kInvalidArgument, "chat template of {} bytes is larger than the {} allowed",
                      source.size(), kMaxChatTemplateBytes);
  }
  HEARTH_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Template> tmpl, jinja::jinja_parse(source));
  return ChatTemplate(std::move(tmpl));
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  return render(inputs, ChatTemplateLimits{});
}

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs, const ChatTemplateLimits& limits) const {
  std::vector<Value> messages;
  messages.reserve(inputs.messages.size());
  for (size_t i = 0; i < inputs.messages.size(); ++i) {
    auto message = message_value(inputs.messages[i]);
    if (!message.is_ok()) return message.status().with_context(fmt::format("messages[{}]", i));
    messages.push_back(std::move(message).value());
  }
  std::vector<std::pair<std::string, Value>> vars;
  vars.emplace_back("messages", Value::list(std::move(messages)));
  vars.emplace_back("add_generation_prompt", Value::boolean(inputs.add_generation_prompt));
  vars.emplace_back("bos_token", Value::string(inputs.bos_token));
  vars.emplace_back("eos_token", Value::string(inputs.eos_token));
  for (const auto& kv : inputs.extra) {
    auto v = Value::from_json(kv.value());
    if (!v.is_ok()) return v.status().with_context(std::string(kv.key()));
    set_variable(vars, std::string(kv.key()), std::move(v).value());
  }
  jinja::RenderLimits render_limits;
  render_limits.max_steps = limits.max_steps;
  render_limits.max_output_bytes = limits.max_output_bytes;
  render_limits.max_call_depth = limits.max_call_depth;
  jinja::Interpreter interpreter(*tmpl_, render_limits);
  return interpreter.render(std::move(vars));
}

}  // namespace hearth
