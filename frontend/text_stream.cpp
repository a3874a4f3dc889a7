#include "frontend/text_stream.h"

#include <algorithm>

#include "common/utf8.h"

namespace hearth {
namespace {

// Where the earliest of `stops` begins in `text`, or npos; `which` is set to it (the
// first listed of those that begin there).
size_t find_first_stop(std::string_view text, const std::vector<std::string>& stops, std::string& which) {
  size_t first = std::string_view::npos;
  for (const std::string& s : stops) {
    const size_t at = text.find(s);
    if (at < first) {
      first = at;
      which = s;
    }
  }
  return first;
}

}  // namespace

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool at_start)
    : detok_(tokenizer, at_start) {
  for (std::string& s : stop) {
    // Decoded text is valid UTF-8, so a match must begin and end on character
    // boundaries: a stop string that is not valid UTF-8 could only match bytes inside a
    // character, and would cut one in half.
    if (s.empty() || !utf8_is_valid(s)) continue;
    max_stop_ = std::max(max_stop_, s.size());
    stop_.push_back(std::move(s));
  }
}

std::string TextStream::push(TokenId id) {
  if (stopped_) return {};
  const std::string text = detok_.push(id);
  if (text.empty()) return {};
  pending_ += text;
  // Text already emitted holds no stop string and pending_ keeps the last max_stop_ - 1
  // bytes, so any stop string that the new text completes lies wholly in pending_.
  const size_t at = find_first_stop(pending_, stop_, stop_found_);
  if (at != std::string::npos) {
    pending_.resize(at);
    stopped_ = true;
    return release(0);
  }
  return release(max_stop_ == 0 ? 0 : max_stop_ - 1);
}

std::string TextStream::finish() {
  if (stopped_) return {};
  // The detokenizer's held bytes come out as U+FFFD; a stop string may still end in them.
  pending_ += detok_.finish();
  const size_t at = find_first_stop(pending_, stop_, stop_found_);
  if (at != std::string::npos) {
    pending_.resize(at);
    stopped_ = true;
  }
  return release(0);
}

// Emits pending_ but its last `keep` bytes, moving the cut back to the start of the
// character it falls in (pending_ is valid UTF-8: the detokenizer sanitizes it).
std::string TextStream::release(size_t keep) {
  if (pending_.size() <= keep) return {};
  const size_t cut = utf8_complete_prefix(std::string_view(pending_).substr(0, pending_.size() - keep));
  std::string out = pending_.substr(0, cut);
  pending_.erase(0, cut);
  emitted_ += out;
  return out;
}

}  // namespace hearth
