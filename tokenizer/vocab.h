// TokenizerVocab: the id <-> piece tables, token types, per-token decoded bytes and the
// BOS/EOS rules every Tokenizer reads. Internal to tokenizer/.
//
// Built once by a format loader, then shared read-only (immutable after
// vocab_finalize()), so any number of threads may read it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "tokenizer/piece_index.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

// Hard bounds that keep a hostile file from sizing our allocations.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;  // 4M pieces
inline constexpr size_t kMaxPieceBytes = 1024;              // one piece's text
inline constexpr int64_t kMaxMerges = int64_t{1} << 23;     // 8M merge rules

// Hash for string keys that also accepts string_view lookups (no temporary strings).
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using PieceMap = std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>>;

namespace detail {

struct TokenizerVocab {
  std::vector<std::string> pieces;  // [vocab]
  std::vector<TokenType> types;     // [vocab]
  std::vector<std::string> bytes;   // [vocab] what each token adds to decoded text
  PieceIndex piece_ids;             // piece -> lowest id carrying it
  std::vector<TokenId> duplicate_ids;  // ids whose piece a lower id carries, in order

  TokenId bos_id = -1;
  TokenId eos_id = -1;
  TokenId unk_id = -1;
  std::vector<TokenId> extra_stop_ids;  // EOT / EOM: folded into stop_ids by vocab_finalize
  std::vector<TokenId> stop_ids;
  bool add_bos = false;
  bool add_eos = false;
  bool strips_leading_space = false;
  std::string chat_template;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
  bool valid(TokenId id) const { return id >= 0 && id < size(); }
  std::optional<TokenId> find(std::string_view piece) const {
    return piece_ids.find(pieces, piece);
  }
};

}  // namespace detail

using TokenizerVocab = detail::TokenizerVocab;

// Resizes the tables to `n` entries (empty pieces, kUnused) before a loader fills them.
void vocab_resize(TokenizerVocab& vocab, int32_t n);

// Rebuilds piece_ids and duplicate_ids from pieces (the lowest id wins for duplicates;
// empty pieces are not indexed).
void vocab_index(TokenizerVocab& vocab);

// Applies the model config's overrides from `source` (BOS, extra stop ids), checks every
// special id against the vocabulary and computes stop_ids. Called last by each loader.
Status vocab_finalize(TokenizerVocab& vocab, const TokenizerSource& source);

// "<0xAB>" -> 0xAB; nullopt for anything else.
std::optional<uint8_t> parse_byte_piece(std::string_view piece);

// "<0xAB>" for byte b.
std::string byte_piece(uint8_t b);

// U+2581 (LOWER ONE EIGHTH BLOCK), SentencePiece's visible space.
inline constexpr std::string_view kSpmSpace = "\xe2\x96\x81";

// What SentencePiece prints for an unknown piece.
inline constexpr std::string_view kSpmUnknownSurface = " \xe2\x81\x87 ";

// What a SentencePiece-style piece of `type` adds to decoded text: U+2581 as spaces,
// "<0xAB>" as that byte, the unknown surface, nothing for control and unused pieces.
std::string spm_piece_bytes(std::string_view piece, TokenType type);

// The largest text encode() accepts.
inline constexpr size_t kMaxEncodeBytes = size_t{64} << 20;

// Refuses text that encode() must not take: invalid UTF-8 (kInvalidArgument naming the
// byte offset) or more than kMaxEncodeBytes.
Status check_encode_input(std::string_view text);

// `text` with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to);

}  // namespace hearth
