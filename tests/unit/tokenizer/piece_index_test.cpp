// PieceIndex: the flat piece -> id table the vocabularies and SentencePiece merges look
// pieces up in, and the duplicate rules the SentencePiece model builds on it.
#include "tokenizer/piece_index.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

TEST(PieceIndexTest, FindsEveryPieceAndTheFirstIdOfADuplicate) {
  const std::vector<std::string> pieces = {"a", "b", "ab", "a", "", "▁the", "ab"};
  PieceIndex index;  // no reserve: it grows as ids go in
  std::vector<bool> added;
  for (TokenId id = 0; id < static_cast<TokenId>(pieces.size()); ++id) added.push_back(index.insert(pieces, id));
  EXPECT_EQ(added, (std::vector<bool>{true, true, true, false, true, true, false}));
  EXPECT_EQ(index.size(), 5u);
  EXPECT_EQ(index.find(pieces, "a"), 0);
  EXPECT_EQ(index.find(pieces, "ab"), 2);
  EXPECT_EQ(index.find(pieces, ""), 4);
  EXPECT_EQ(index.find(pieces, "▁the"), 5);
  EXPECT_EQ(index.find(pieces, "abc"), std::nullopt);
  EXPECT_EQ(index.find(pieces, "▁th"), std::nullopt);
  EXPECT_EQ(PieceIndex().find(pieces, "a"), std::nullopt);  // empty: no table at all
}

// Random pieces of every length from 0 to 40 bytes (the hash reads 8-byte words, then a
// 4-7 byte or a 1-3 byte tail), many differing in one byte only, checked against a
// std::unordered_map: every piece is found with its first id, none that is absent is.
TEST(PieceIndexTest, AgreesWithAHashMapOnRandomPiecesOfEveryLength) {
  std::mt19937 rng(7);
  std::vector<std::string> pieces;
  for (int i = 0; i < 20000; ++i) {
    std::string p(rng() % 41, '\0');
    for (char& c : p) c = static_cast<char>("ab\xe2\x96\x81z"[rng() % 6]);  // few letters: many near-duplicates
    pieces.push_back(p);
  }
  for (size_t i = 0; i < 2000; ++i) pieces.push_back(pieces[rng() % pieces.size()]);  // exact duplicates
  PieceIndex index;
  index.reserve(pieces.size() / 4);  // too small: it must grow past it
  std::unordered_map<std::string, TokenId> want;
  for (TokenId id = 0; id < static_cast<TokenId>(pieces.size()); ++id) {
    const bool first = want.emplace(pieces[static_cast<size_t>(id)], id).second;
    ASSERT_EQ(index.insert(pieces, id), first) << "id " << id;
  }
  EXPECT_EQ(index.size(), want.size());
  for (const auto& [piece, id] : want) ASSERT_EQ(index.find(pieces, piece), id) << piece;
  for (int i = 0; i < 20000; ++i) {
    std::string q(rng() % 41, '\0');
    for (char& c : q) c = static_cast<char>("abyz"[rng() % 4]);
    const auto it = want.find(q);
    ASSERT_EQ(index.find(pieces, q), it == want.end() ? std::nullopt : std::optional<TokenId>(it->second)) << q;
  }
}

TEST(PieceIndexTest, TheHashSeesEveryByteOfShortPieces) {
  // Pieces of 0-16 bytes that differ in one byte at each position hash apart.
  for (size_t n = 1; n <= 16; ++n) {
    for (size_t at = 0; at < n; ++at) {
      std::string a(n, 'x'), b(n, 'x');
      b[at] = 'y';
      EXPECT_NE(PieceIndex::hash(a), PieceIndex::hash(b)) << n << " bytes, at " << at;
    }
    EXPECT_NE(PieceIndex::hash(std::string(n, 'x')), PieceIndex::hash(std::string(n + 1, 'x'))) << n;
  }
}

// A GGUF "llama" vocabulary where a piece is first a control token and later a normal
// one: merges use the later, mergeable id (the control token's text is never a merge),
// and a piece only a control token carries is never merged into.
TEST(PieceIndexTest, SentencePieceMergesSkipAControlTokensTextForALaterNormalPiece) {
  TokenizerSource source;
  source.kind = TokenizerSource::Kind::kGguf;
  GgufVocab& g = source.gguf;
  g.model = "llama";
  g.tokens = {"<unk>", "<s>", "</s>", "ab", "a", "b", "\xe2\x96\x81", "ab", "cd", "c", "d"};
  g.scores = {0, 0, 0, 0, -1, -1, -1, -2, -3, -1, -1};
  // 3 "ab" is a control token, 7 "ab" a normal one; 8 "cd" is control only.
  g.token_types = {2, 3, 3, 3, 1, 1, 1, 1, 3, 1, 1};
  g.add_bos = false;
  g.add_space_prefix = false;
  auto tok = tokenizer_load(std::move(source));
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const EncodeOptions plain{.add_special = false, .parse_special = false};
  EXPECT_EQ(*(*tok)->encode("ab", plain), (std::vector<TokenId>{7}));
  EXPECT_EQ(*(*tok)->encode("cd", plain), (std::vector<TokenId>{9, 10}));
  EXPECT_EQ((*tok)->find_piece("ab"), 3);  // the vocabulary's own lookup: the lowest id
}

}  // namespace
}  // namespace hearth
