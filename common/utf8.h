// UTF-8 validation and decoding (strict: no overlong forms, surrogates or values past
// U+10FFFF). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

// Byte offset of the first invalid sequence, or text.size() when all of it is valid.
size_t utf8_find_invalid(std::string_view text);
inline bool utf8_is_valid(std::string_view text) { return utf8_find_invalid(text) == text.size(); }

// Length of the longest prefix of `bytes` that ends on a character boundary, treating a
// truncated but so-far-valid sequence at the end as incomplete (not yet emitted).
// Invalid bytes count as complete single characters so that they are not held forever.
size_t utf8_complete_prefix(std::string_view bytes);

// Bytes of the UTF-8 sequence a lead byte starts (1 for ASCII and stray bytes).
inline size_t utf8_sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xf0) return 4;
  if (lead >= 0xe0) return 3;
  if (lead >= 0xc0) return 2;
  return 1;
}

// Decodes one code point at `pos` of valid UTF-8 and advances pos.
char32_t utf8_decode(std::string_view text, size_t& pos);
void utf8_append(std::string& out, char32_t cp);

// Replaces each invalid byte with U+FFFD.
std::string utf8_sanitize(std::string_view bytes);

// Any bytes as code points, the way Python sees a str decoded with errors kept: each
// invalid byte is one code point of its own value.
// Decodes one code point at `pos` (advancing it); an invalid byte decodes to itself.
char32_t utf8_next(std::string_view s, size_t& pos);
// Code points in `s`.
size_t utf8_length(std::string_view s);
// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);

}  // namespace hearth
