// SpmModel: SentencePiece-style, score-based BPE (llama.cpp's "llama" vocabularies,
// llama2.c): starting from single characters, the adjacent pair whose joined piece has
// the highest score is merged first, leftmost on ties (priority queue, O(n log n)).
// Characters left without a piece become <0xAB> byte tokens, else the unknown token.
// Immutable after build(); thread-safe.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/vocab.h"

namespace hearth {

class SpmModel {
 public:
  // Over `vocab`, whose pieces, types, index (vocab_index) and unknown id are final:
  // `scores` gives each piece's ([vocab]); only kNormal and kUserDefined pieces take part
  // in merges, and scores must not be NaN. The model looks pieces up in the vocabulary's
  // own index rather than building a second one.
  static Result<SpmModel> build(std::shared_ptr<const TokenizerVocab> vocab, std::vector<float> scores);

  // Appends the ids of `text` (already normalized: spaces escaped, prefix added).
  void encode(std::string_view text, std::vector<TokenId>& out) const;

 private:
  // The lowest mergeable id carrying `piece`.
  std::optional<TokenId> find(std::string_view piece) const;

  std::shared_ptr<const TokenizerVocab> vocab_;
  // Pieces whose lowest id is not mergeable (a control token's text) but a later one is:
  // that later id (keyed by vocab_->pieces). Empty for every vocabulary without such
  // duplicates.
  PieceIndex later_mergeable_;
  std::vector<float> scores_;  // [vocab]
  TokenId unk_id_ = -1;
  std::array<TokenId, 256> byte_ids_{};  // -1 when absent
};

}  // namespace hearth
