// ChatTemplate: renders a model's Hugging Face chat template (tokenizer_config.json's
// "chat_template", GGUF's tokenizer.chat_template) into the prompt text.
//
// Templates are Jinja2 as transformers runs them: trim_blocks and lstrip_blocks on, one
// trailing newline dropped, no autoescaping, an immutable sandbox (lists and dicts cannot
// be changed; namespace() can), loop controls, `{% generation %}`, and the globals
// raise_exception(msg) and strftime_now(fmt). chat/README.md lists the supported
// subset. Values follow Python: truthiness, str()/repr(), int/float arithmetic, code point
// indexing of strings.
//
// A parsed ChatTemplate is immutable: render() is const and may run on many threads at
// once. Nothing aborts on input: bad templates, bad inputs, template errors and runaway
// templates all come back as Status.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth {

namespace jinja {
struct Template;  // chat/jinja_ast.h
}  // namespace jinja

struct ChatMessage {
  std::string role;
  std::string content;
  // More fields of the message ("name", "reasoning_content", "tool_calls", ...). A key
  // here replaces role or content (e.g. content given as a list of parts).
  boost::json::object extra;
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // More top-level variables ("enable_thinking", "tools", ...); they replace the above
  // when they share a name.
  boost::json::object extra;
};

// Budgets of one render; running out is kResourceExhausted, never a hang.
struct ChatTemplateLimits {
  uint64_t max_steps = 10'000'000;      // expressions, statements and loop iterations
  size_t max_output_bytes = 32u << 20;  // the output, and any one string or list built
  int max_call_depth = 64;              // nested macro calls
};

class ChatTemplate {
 public:
  // Parses the template once. Syntax errors are kInvalidArgument, constructs outside
  // the subset kUnsupported; both messages start with "line:column: ".
  static Result<ChatTemplate> parse(std::string_view source);

  // Renders the prompt. raise_exception("msg") in the template gives kInvalidArgument
  // with exactly "msg"; other template errors (undefined names used, type errors) are
  // kInvalidArgument starting with "line:column: "; a budget running out is
  // kResourceExhausted.
  Result<std::string> render(const ChatTemplateInputs& inputs) const;
  // The same with explicit budgets.
  Result<std::string> render(const ChatTemplateInputs& inputs, const ChatTemplateLimits& limits) const;

 private:
  explicit ChatTemplate(std::shared_ptr<const jinja::Template> tmpl) : tmpl_(std::move(tmpl)) {}

  std::shared_ptr<const jinja::Template> tmpl_;
};

// Largest template source parse() accepts.
inline constexpr size_t kMaxChatTemplateBytes = 1u << 20;

}  // namespace hearth
