#include "frontend/reasoning.h"

#include <algorithm>

namespace hearth {
namespace {

// The length of the longest suffix of `text` that is a proper prefix of `tag`.
size_t partial_tag_suffix(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n) {
    if (tag.starts_with(text.substr(text.size() - n))) return n;
  }
  return 0;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

}  // namespace

Result<ReasoningFormat> reasoning_format_from_name(std::string_view name) {
  if (name == "deepseek_r1" || name == "qwen3") return ReasoningFormat::kThinkTags;
  if (name == "none" || name.empty()) return ReasoningFormat::kNone;
  return make_error(ErrorCode::kInvalidArgument, "--reasoning-parser must be deepseek_r1, qwen3 or none, not \"{}\"",
                    name);
}

bool prompt_opens_reasoning(std::string_view text) {
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text.ends_with(kThinkOpen);
}

ReasoningSplitter::Split ReasoningSplitter::push(std::string_view text) {
  Split out;
  held_.append(text);
  while (!held_.empty()) {
    if (state_ == State::kStart) {
      // Whitespace, then the open tag or not.
      const size_t first = held_.find_first_not_of(" \n\r\t");
      if (first == std::string::npos) return out;  // only whitespace so far
      const std::string_view rest = std::string_view(held_).substr(first);
      if (rest.starts_with(kThinkOpen)) {
        held_.erase(0, first + kThinkOpen.size());
        state_ = State::kReasoning;
        continue;
      }
      if (kThinkOpen.starts_with(rest)) return out;  // may still become the tag
      state_ = State::kContent;
      continue;
    }
    if (state_ == State::kReasoning) {
      const size_t close = held_.find(kThinkClose);
      if (close == std::string::npos) {
        const size_t keep = partial_tag_suffix(held_, kThinkClose);
        out.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return out;
      }
      out.reasoning.append(held_, 0, close);
      held_.erase(0, close + kThinkClose.size());
      state_ = State::kContent;
      trim_ = true;
      continue;
    }
    if (trim_) {
      const size_t first = held_.find_first_not_of("\r\n");
      if (first == std::string::npos) {
        held_.clear();
        return out;
      }
      held_.erase(0, first);
      trim_ = false;
    }
    out.content += held_;
    held_.clear();
  }
  return out;
}

ReasoningSplitter::Split ReasoningSplitter::finish() {
  Split out;
  if (state_ == State::kReasoning) {
    out.reasoning = std::move(held_);
  } else if (!(state_ == State::kContent && trim_)) {
    out.content = std::move(held_);
  }
  held_.clear();
  if (state_ == State::kStart) state_ = State::kContent;
  return out;
}

}  // namespace hearth
