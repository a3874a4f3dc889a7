// IncrementalDetokenizer: streamed text never holds half a character and adds up to
// decode().
#include <gtest/gtest.h>

#include "common/utf8.h"
#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::load_from_path;
using testing::shared_path;

struct Streamed {
  std::string text;
  size_t empty_pushes = 0;  // pushes that held bytes back
};

Streamed stream(const Tokenizer& tokenizer, const std::vector<TokenId>& ids, bool at_start = true) {
  IncrementalDetokenizer detok(tokenizer, at_start);
  Streamed out;
  for (const TokenId id : ids) {
    const std::string chunk = detok.push(id);
    EXPECT_TRUE(utf8_is_valid(chunk)) << "push(" << id << ") emitted a partial character";
    EXPECT_EQ(chunk.find("\xEF\xBF\xBD"), std::string::npos) << "push(" << id << ") emitted U+FFFD";
    if (chunk.empty()) ++out.empty_pushes;
    out.text += chunk;
  }
  out.text += detok.finish();
  return out;
}

TEST(IncrementalDetokenizer, ByteFallbackCharactersSplitAcrossTokens) {
  const auto path = shared_path("models/llama2-tokenizer/tokenizer.model");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  for (const char* text : {"emoji \xf0\x9f\xa6\x99\xf0\x9f\x94\xa5 test",
                           "\xe5\xa4\xa7\xe6\xa8\xa1\xe5\x9e\x8b"
                           "\xe6\x8e\xa8\xe7\x90\x86\xe6\x9c\x8d\xe5\x8a\xa1\xe9\x83\xa8\xe7\xbd\xb2\xe6\x8c\x87"
                           "\xe5\x8d\x97"}) {
    auto ids = tokenizer->encode(text);  // with BOS
    ASSERT_TRUE(ids.is_ok());
    size_t byte_tokens = 0;
    for (const TokenId id : *ids) byte_tokens += tokenizer->type(id) == TokenType::kByte;
    EXPECT_GE(byte_tokens, 3u) << "the text should need byte-fallback tokens";
    const Streamed s = stream(*tokenizer, *ids);
    EXPECT_EQ(s.text, tokenizer->decode(*ids));
    EXPECT_EQ(s.text, text);
    EXPECT_GE(s.empty_pushes, 2u) << "bytes of unfinished characters should have been held";
  }
}

TEST(IncrementalDetokenizer, MatchesDecodeOnEveryVector) {
  for (const char* model : {"models/llama2-tokenizer/tokenizer.model", "models/stories260K/tok512.bin"}) {
    const auto path = shared_path(model);
    const auto vectors =
        path.parent_path() /
        (path.parent_path().filename() == "stories260K" ? "tok512.vectors.jsonl" : "tokenizer.vectors.jsonl");
    HEARTH_REQUIRE_SHARED(path);
    HEARTH_REQUIRE_SHARED(vectors);
    auto tokenizer = load_from_path(path);
    ASSERT_NE(tokenizer, nullptr);
    for (const auto& c : testing::read_jsonl_vectors(vectors)) {
      EXPECT_EQ(stream(*tokenizer, c.ids).text, tokenizer->decode(c.ids)) << c.text;
      DecodeOptions mid;
      mid.at_start = false;
      EXPECT_EQ(stream(*tokenizer, c.ids, false).text, tokenizer->decode(c.ids, mid)) << c.text;
    }
  }
}

TEST(IncrementalDetokenizer, LeadingSpaceOnlyAtStartOfText) {
  const auto path = shared_path("models/llama2-tokenizer/tokenizer.model");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  ASSERT_TRUE(tokenizer->strips_leading_space());
  const std::vector<TokenId> hello = {1, 15043, 3186};  // BOS "▁Hello" "▁world"
  EXPECT_EQ(stream(*tokenizer, hello).text, "Hello world");
  EXPECT_EQ(stream(*tokenizer, {15043, 3186}, /*at_start=*/false).text, " Hello world");
  // BOS produces no text, so the first text-producing token is the one stripped.
  IncrementalDetokenizer detok(*tokenizer, true);
  EXPECT_EQ(detok.push(1), "");
  EXPECT_EQ(detok.push(15043), "Hello");
  EXPECT_EQ(detok.push(15043), " Hello");
}

TEST(IncrementalDetokenizer, FinishFlushesBrokenBytesAsReplacement) {
  const auto path = shared_path("models/llama2-tokenizer/tokenizer.model");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  const auto f0 = tokenizer->find_piece("<0xF0>");
  const auto x9f = tokenizer->find_piece("<0x9F>");
  ASSERT_TRUE(f0 && x9f);
  IncrementalDetokenizer detok(*tokenizer, false);
  EXPECT_EQ(detok.push(*f0), "");
  EXPECT_EQ(detok.push(*x9f), "");
  EXPECT_EQ(detok.finish(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // A lead byte followed by a plain token: the broken byte is replaced right away.
  IncrementalDetokenizer detok2(*tokenizer, false);
  EXPECT_EQ(detok2.push(*f0), "");
  EXPECT_EQ(detok2.push(15043), "\xEF\xBF\xBD Hello");
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{*f0, 15043}, DecodeOptions{true, false}), "\xEF\xBF\xBD Hello");
}

TEST(IncrementalDetokenizer, ControlTokensFollowSkipSpecial) {
  const auto path = shared_path("models/llama2-tokenizer/tokenizer.model");
  HEARTH_REQUIRE_SHARED(path);
  auto tokenizer = load_from_path(path);
  ASSERT_NE(tokenizer, nullptr);
  IncrementalDetokenizer keep(*tokenizer, true, /*skip_special=*/false);
  EXPECT_EQ(keep.push(1), "<s>");
  EXPECT_EQ(keep.push(15043), " Hello");
  EXPECT_EQ(keep.push(2), "</s>");
  EXPECT_EQ(tokenizer->decode(std::vector<TokenId>{1, 15043, 2}, DecodeOptions{false, true}), "<s> Hello</s>");
}

}  // namespace
}  // namespace hearth
