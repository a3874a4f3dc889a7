#include "common/utf8.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

TEST(Utf8Test, ValidatesStrictly) {
  EXPECT_TRUE(utf8_is_valid("plain ascii"));
  EXPECT_TRUE(utf8_is_valid("caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80"));
  EXPECT_EQ(utf8_find_invalid("ab\xff"), 2u);
  EXPECT_EQ(utf8_find_invalid("\xc0\x80"), 0u);          // overlong NUL
  EXPECT_EQ(utf8_find_invalid("\xe0\x80\xaf"), 0u);      // overlong
  EXPECT_EQ(utf8_find_invalid("\xed\xa0\x80"), 0u);      // surrogate
  EXPECT_EQ(utf8_find_invalid("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(utf8_find_invalid("x\xe4\xb8"), 1u);         // truncated at the end
}

TEST(Utf8Test, CompletePrefixHoldsBackOnlyAnUnfinishedTail) {
  EXPECT_EQ(utf8_complete_prefix("ab\xe4\xb8"), 2u);
  EXPECT_EQ(utf8_complete_prefix("ab\xe4\xb8\xad"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\xf0\x9f"), 0u);
  EXPECT_EQ(utf8_complete_prefix("a\xff" "b"), 3u);  // invalid bytes are not held forever
}

TEST(Utf8Test, DecodesAndEncodesRoundTrip) {
  const std::string s = "a\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80";
  std::string back;
  size_t pos = 0;
  std::vector<char32_t> cps;
  while (pos < s.size()) cps.push_back(utf8_decode(s, pos));
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', U'\u00e9', U'\u4e2d', U'\U0001F600'}));
  for (char32_t c : cps) utf8_append(back, c);
  EXPECT_EQ(back, s);
}

// Python's view of a str with its invalid bytes kept: each is one code point of its own.
TEST(Utf8Test, LenientDecodingCountsEachInvalidByteAsOneCodePoint) {
  const std::string s = "a\xc3\xa9\xff\xe4\xb8" "b";  // a, e-acute, a stray byte, a truncated sequence, b
  size_t pos = 0;
  std::vector<char32_t> cps;
  while (pos < s.size()) cps.push_back(utf8_next(s, pos));
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', U'\u00e9', 0xff, 0xe4, 0xb8, U'b'}));
  EXPECT_EQ(utf8_length(s), 6u);
  EXPECT_EQ(utf8_offsets(s), (std::vector<size_t>{0, 1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(utf8_length(""), 0u);
  EXPECT_EQ(utf8_offsets(""), (std::vector<size_t>{0}));
}

TEST(Utf8Test, SanitizeReplacesBadBytes) {
  EXPECT_EQ(utf8_sanitize("a\xff" "b"), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(utf8_sanitize("ok"), "ok");
}

}  // namespace
}  // namespace hearth
