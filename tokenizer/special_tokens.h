// SpecialTokenMatcher: finds added / special tokens ("<|eot_id|>", "<think>") in input
// text, leftmost first and longest at each position, so the rest of the text can be
// tokenized around them. Built at load time, then immutable and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

struct AddedToken {
  TokenId id = -1;
  std::string content;
  bool special = false;      // matched only when EncodeOptions::parse_special is set
  bool lstrip = false;       // swallows the whitespace before it
  bool rstrip = false;       // swallows the whitespace after it
  bool single_word = false;  // matches only when not inside a word
};

class SpecialTokenMatcher {
 public:
  // Registers a token; empty contents are ignored. Fails when the tokens together grow
  // the match table past its bound.
  Status add(AddedToken token);
  bool empty() const { return tokens_.empty(); }

  // One piece of a split: text [begin, end) of the input, or a matched token (id >= 0)
  // that covers [begin, end) including any whitespace it swallowed.
  struct Piece {
    size_t begin = 0;
    size_t end = 0;
    TokenId id = -1;
  };

  // Splits valid UTF-8 `text` into text pieces (never empty) and token pieces, in order.
  void split(std::string_view text, bool parse_special, std::vector<Piece>& out) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                 // index into tokens_
  };
  int32_t child(int32_t node, uint8_t byte) const;
  bool word_boundary_ok(std::string_view text, size_t begin, size_t end) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_;
  bool first_byte_[256] = {};
};

}  // namespace hearth
