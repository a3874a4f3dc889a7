// SpmModel: SentencePiece-style, score-based BPE (llama.cpp's "llama" vocabularies,
// llama2.c): starting from single characters, the adjacent pair whose joined piece has
// the highest score is merged first, leftmost on ties (priority queue, O(n log n)).
// Characters left without a piece become <0xAB> byte tokens, else the unknown token.
// Immutable after build(); thread-safe.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/vocab.h"

namespace hearth {

class SpmModel {
 public:
  // `pieces`/`types`/`scores` describe the whole vocabulary ([vocab] each). Only kNormal
  // and kUserDefined pieces take part in merges. Scores must not be NaN.
  static Result<SpmModel> build(const std::vector<std::string>& pieces, const std::vector<TokenType>& types,
                                const std::vector<float>& scores, TokenId unk_id);

  // Appends the ids of `text` (already normalized: spaces escaped, prefix added).
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  PieceMap vocab_;             // mergeable pieces
  std::vector<float> scores_;  // [vocab]
  TokenId unk_id_ = -1;
  std::array<TokenId, 256> byte_ids_{};  // -1 when absent
};

}  // namespace hearth
