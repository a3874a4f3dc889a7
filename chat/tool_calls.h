// Tool calls in generated text: the formats of the template families hearth knows, told
// apart by the markers a template writes, and a parser that splits a model's output into
// content and calls as it streams.
//
// Formats: Hermes / Qwen (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
// any number, content may come first); Llama 3 JSON (the whole answer is
// `{"name": ..., "parameters": {...}}`, several separated by `;`, optionally after
// `<|python_tag|>`); Mistral (`[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]`,
// the marker optional since it is a control token that decoded text leaves out).
// Output that looks like a call but does not parse as one is content.
//
// A ToolCallParser belongs to one choice of one request; not thread-safe. The rest is pure.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth {

enum class ToolCallFormat : uint8_t { kNone, kHermes, kLlama3Json, kMistral };

std::string_view tool_call_format_name(ToolCallFormat format);  // "hermes", "llama3_json", "mistral", "none"
// --tool-call-parser's names; kInvalidArgument naming the choices otherwise.
Result<ToolCallFormat> tool_call_format_from_name(std::string_view name);
// The format a chat template writes tool calls in, read from its source; kNone when it
// does not take tools.
ToolCallFormat tool_call_format_detect(std::string_view template_source);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, serialized
};

class ToolCallParser {
 public:
  explicit ToolCallParser(ToolCallFormat format) : format_(format) {}

  // The next piece of output: returns the text that is content for sure (never part of a
  // call), and appends the calls it completed.
  std::string push(std::string_view text, std::vector<ToolCall>& calls);
  // The output ended: what was held back, as content or calls.
  std::string finish(std::vector<ToolCall>& calls);

 private:
  std::string push_hermes(std::vector<ToolCall>& calls);
  std::string finish_held(std::vector<ToolCall>& calls);

  ToolCallFormat format_;
  std::string held_;        // text not yet known to be content
  bool decided_ = false;    // Llama 3 / Mistral: whether the answer opens with a call is known
  bool calling_ = false;    // inside a call (Hermes) or an answer of calls (Llama 3, Mistral)
  bool after_call_ = false; // Hermes: a call just ended (whitespace after it is not content)
};

// Parses one call object ({"name": ..., "arguments" or "parameters": {...}}); false when
// `json` is not one.
bool tool_call_parse_object(std::string_view json, ToolCall& out);

}  // namespace hearth
