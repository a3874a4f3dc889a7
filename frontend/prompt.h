// A request's prompt as token ids: a completion's text or ids (with a suffix, in the
// model's fill-in-the-middle format), or a chat's messages (and tools) through the chat
// template. The template is the model's own or the one the server was started with
// (--chat-template NAME|FILE); a model with neither gets a 400 on chat, never a silent
// concatenation. Immutable after creation: thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "chat/tool_calls.h"
#include "common/status.h"
#include "frontend/openai.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

// The special tokens of a fill-in-the-middle prompt: prefix, suffix, middle.
struct FimTokens {
  TokenId prefix = -1, suffix = -1, middle = -1;
};
// The vocabulary's FIM tokens (<|fim_prefix|>..., <fim_prefix>..., CodeLlama's <PRE> ...).
std::optional<FimTokens> fim_tokens_find(const Tokenizer& tokenizer);

struct PromptOptions {
  std::string chat_template;              // --chat-template: a built-in name or a file's path; "": the model's
  std::string tool_call_parser;           // --tool-call-parser: a format name; "": read from the template
};

struct Prompt {
  std::vector<TokenId> ids;
  std::string echo_text;  // completions' echo: the prompt as text
  bool opens_reasoning = false;  // chat: the rendered prompt ends inside <think> (see reasoning.h)
};

class PromptBuilder {
 public:
  // `model_template`: the template the weights segment carries ("" when none).
  static Result<PromptBuilder> create(const Tokenizer& tokenizer, std::string_view model_template,
                                      const PromptOptions& options);

  Result<Prompt> build(const ApiRequest& request) const;
  ToolCallFormat tool_format() const { return tool_format_; }
  bool has_chat_template() const { return chat_template_ != nullptr; }
  // Where the template came from, for logs: "the model's", "built-in chatml", a path.
  const std::string& template_origin() const { return origin_; }

 private:
  const Tokenizer* tokenizer_ = nullptr;
  std::shared_ptr<const ChatTemplate> chat_template_;
  std::string origin_;
  ToolCallFormat tool_format_ = ToolCallFormat::kNone;
  std::optional<FimTokens> fim_;
};

}  // namespace hearth
