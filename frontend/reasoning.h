// Reasoning output: a thinking model (Qwen3, DeepSeek-R1 and the models trained like them)
// writes its reasoning between <think> and </think> before its answer. With
// --reasoning-parser the frontend returns the two apart: reasoning_content in chat
// completions, thinking blocks in Messages, reasoning items in Responses.
//
// A template may open the reasoning itself (DeepSeek-R1's generation prompt ends with
// "<think>\n"): then the output starts inside it and only the close tag comes. Tags are
// matched across token boundaries; the text that could still be the start of one is held
// back until it cannot. Not thread-safe: one per choice.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace hearth {

enum class ReasoningFormat : uint8_t { kNone, kThinkTags };

// "deepseek_r1" and "qwen3" (vLLM's names; both <think>...</think>), "none".
Result<ReasoningFormat> reasoning_format_from_name(std::string_view name);

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";

// Whether a rendered prompt leaves the model inside its reasoning: it ends (but for
// whitespace) with the open tag.
bool prompt_opens_reasoning(std::string_view prompt_text);

class ReasoningSplitter {
 public:
  // `inside`: the prompt opened the reasoning.
  explicit ReasoningSplitter(bool inside) : state_(inside ? State::kReasoning : State::kStart) {}

  struct Split {
    std::string reasoning;
    std::string content;
  };
  // The next piece of output text, split; what might still be a tag is held back.
  Split push(std::string_view text);
  // At the end: what was held back (a reasoning never closed stays reasoning).
  Split finish();
  // Whether the output is in its reasoning now.
  bool in_reasoning() const { return state_ == State::kReasoning; }

 private:
  enum class State : uint8_t { kStart, kReasoning, kContent };
  State state_;
  std::string held_;
  bool trim_ = false;  // the answer just began after </think>: its leading newlines go
};

}  // namespace hearth
