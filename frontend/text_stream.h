// TextStream: turns the token ids of one choice into the text a client sees, as they
// arrive: UTF-8 safe (never half a character), with stop strings matched across token
// boundaries and never emitted (text that could still become a stop string is held back
// until it cannot). Not thread-safe: one per choice.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth {

class TextStream {
 public:
  // at_start: the ids begin the text (see DecodeOptions::at_start); completions after a
  // prompt pass false. Empty stop strings, and ones that are not valid UTF-8 (they could
  // only match inside a character), are ignored.
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool at_start = false);

  // Adds a token; returns the text that became safe to emit (often empty).
  std::string push(TokenId id);
  // True once a stop string was found: the caller stops generating; push() returns
  // nothing more.
  bool stopped() const { return stopped_; }
  // The stop string that ended the text ("" before, or when none did).
  const std::string& stop_found() const { return stop_found_; }
  // At the end of generation: everything still held back (there is no more stop string
  // to wait for), with unfinished UTF-8 as U+FFFD. Empty after a stop.
  std::string finish();
  // All text emitted so far (the concatenation of what push() and finish() returned).
  const std::string& text() const { return emitted_; }

 private:
  std::string release(size_t keep);

  IncrementalDetokenizer detok_;
  std::vector<std::string> stop_;
  size_t max_stop_ = 0;
  std::string pending_;  // decoded but not yet emitted
  std::string emitted_;
  bool stopped_ = false;
  std::string stop_found_;
};

}  // namespace hearth
