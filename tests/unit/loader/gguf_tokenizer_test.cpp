// The tokenizer embedded in the real stories260K GGUF, against the SentencePiece
// library's own vectors for the same vocabulary.
#include <gtest/gtest.h>

#include "loader/model.h"
#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"

namespace hearth {
namespace {

TEST(GgufTokenizerTest, StoriesGgufVocabularyMatchesSentencePieceVectors) {
  const auto gguf = testing::shared_path("models/stories260K/stories260K.gguf");
  const auto vectors = testing::shared_path("models/stories260K/tok512.vectors.jsonl");
  HEARTH_REQUIRE_SHARED(gguf);
  HEARTH_REQUIRE_SHARED(vectors);
  auto model = model_open(gguf);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  ASSERT_EQ(model->tokenizer.kind, TokenizerSource::Kind::kGguf);
  auto tok = tokenizer_load(model->tokenizer);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  const auto counts = testing::check_vectors(**tok, testing::read_jsonl_vectors(vectors), "stories260K.gguf vocab");
  EXPECT_EQ(counts.encode_pass, counts.total);
  EXPECT_EQ(counts.decode_pass, counts.decode_checked);
  EXPECT_EQ(counts.total, 26u);
  // The prompt of the ground truth, with BOS.
  auto ids = (*tok)->encode("Once upon a time");
  ASSERT_TRUE(ids.is_ok());
  EXPECT_EQ(*ids, (std::vector<TokenId>{1, 403, 407, 261, 378}));
  EXPECT_EQ((*tok)->stop_ids(), std::vector<TokenId>{2});
}

}  // namespace
}  // namespace hearth
