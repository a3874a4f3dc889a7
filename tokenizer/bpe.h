// BpeModel: rank-based byte-pair encoding (Hugging Face "BPE", GPT-2, Llama 3, Qwen):
// the adjacent pair with the lowest merge rank is merged first, leftmost on ties, with a
// priority queue (O(n log n) per word). Immutable after build(); thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/status.h"
#include "tokenizer/vocab.h"

namespace hearth {

struct BpeOptions {
  bool byte_fallback = false;             // unknown characters become <0xAB> tokens when all exist
  bool ignore_merges = false;             // a word that is itself a token is emitted whole
  bool fuse_unk = false;                  // consecutive unknown characters become one unknown token
  TokenId unk_id = -1;                    // -1: unknown characters are dropped
  std::string continuing_subword_prefix;  // "##": marks pieces that do not start a word
  std::string end_of_word_suffix;         // "</w>": marks pieces that end a word
};

class BpeModel {
 public:
  // `model_vocab`: piece -> id of the tokens the model itself owns (added tokens apart);
  // `merges`: the pair list, rank = index. Fails (kFormat) on a merge that names a
  // piece outside the vocabulary or whose result is not in it.
  static Result<BpeModel> build(PieceMap model_vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                BpeOptions options);

  // Appends the ids of one pre-tokenized word.
  void encode(std::string_view word, std::vector<TokenId>& out) const;

 private:
  struct Merge {
    int32_t rank;
    TokenId result;
  };
  static uint64_t key(TokenId a, TokenId b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }

  PieceMap vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::array<TokenId, 256> byte_ids_{};  // <0xAB> token per byte, -1 when absent
};

}  // namespace hearth
