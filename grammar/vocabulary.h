// Vocabulary: a model's tokens as the byte strings they add to the text, and a trie of
// them laid out in depth-first order, so a grammar can find every token it allows in one
// linear pass that skips whole subtrees (grammar/matcher.h). Built once per model.
//
// A token with no bytes (BOS, EOS and other control tokens) is never part of the trie:
// no grammar produces it; a matcher allows a sequence's end tokens by id instead.
// Immutable after build(): thread-safe to share.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "grammar/grammar.h"

namespace hearth::grammar {

class Vocabulary {
 public:
  // One trie node: the byte that leads to it, its depth (1 for a token's first byte), the
  // preorder index just past its subtree, and the tokens that end exactly here.
  struct TrieNode {
    uint32_t subtree_end = 0;
    uint32_t tokens_begin = 0;
    uint16_t tokens_count = 0;
    uint8_t byte = 0;
    uint16_t depth = 0;
  };

  // `bytes[id]`: what token `id` adds to the text ("" for tokens that are not text).
  static Result<Vocabulary> build(std::vector<std::string> bytes);

  int32_t size() const { return static_cast<int32_t>(bytes_.size()); }
  std::string_view bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  // Bytes b for which some token is exactly b: what the fewest-token paths through a
  // grammar may use (grammar/matcher.h's budget), and what a grammar needs to be
  // expressible at all.
  const ByteSet& single_bytes() const { return single_bytes_; }
  // The trie in depth-first preorder (the root itself is not stored).
  std::span<const TrieNode> trie() const { return trie_; }
  std::span<const int32_t> trie_tokens(const TrieNode& n) const {
    return {trie_tokens_.data() + n.tokens_begin, n.tokens_count};
  }
  size_t max_token_bytes() const { return max_token_bytes_; }

 private:
  std::vector<std::string> bytes_;
  ByteSet single_bytes_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  size_t max_token_bytes_ = 0;
};

}  // namespace hearth::grammar
