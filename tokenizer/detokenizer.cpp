#include "common/utf8.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool at_start, bool skip_special)
    : tokenizer_(tokenizer), at_start_(at_start), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::push(TokenId id) {
  std::string_view text = (tokenizer_.type(id) == TokenType::kControl)
                              ? (skip_special_ ? std::string_view() : tokenizer_.piece(id))
                              : tokenizer_.token_bytes(id);
  if (text.empty()) return {};
  if (at_start_ && tokenizer_.strips_leading_space() && text.front() == ' ') text.remove_prefix(1);
  at_start_ = false;
  pending_.append(text);
  const size_t complete = utf8_complete_prefix(pending_);
  if (complete == 0) return {};
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, complete));
  pending_.erase(0, complete);
  return out;
}

std::string IncrementalDetokenizer::finish() {
  std::string out = utf8_sanitize(pending_);
  pending_.clear();
  return out;
}

}  // namespace hearth
