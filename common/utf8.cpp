#include "common/utf8.h"

namespace hearth {
namespace {

// Length of the valid sequence at `pos`, 0 when it is invalid, or -n when it is a valid
// but truncated prefix of n bytes at the end of the input.
int sequence_length(std::string_view s, size_t pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return 1;
  int len;
  unsigned char lo = 0x80, hi = 0xbf;  // bounds of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    if (b0 == 0xe0) lo = 0xa0;          // no overlongs
    if (b0 == 0xed) hi = 0x9f;          // no surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;          // <= U+10FFFF
  } else {
    return 0;
  }
  for (int i = 1; i < len; ++i) {
    if (pos + i >= s.size()) return -i;
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const unsigned char l = (i == 1) ? lo : 0x80, h = (i == 1) ? hi : 0xbf;
    if (b < l || b > h) return 0;
  }
  return len;
}

}  // namespace

size_t utf8_find_invalid(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const int len = sequence_length(text, pos);
    if (len <= 0) return pos;
    pos += static_cast<size_t>(len);
  }
  return text.size();
}

size_t utf8_complete_prefix(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int len = sequence_length(bytes, pos);
    if (len < 0) return pos;     // truncated tail: hold it back
    pos += (len == 0) ? 1 : static_cast<size_t>(len);
  }
  return pos;
}

char32_t utf8_decode(std::string_view text, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  int len = b0 >= 0xf0 ? 4 : b0 >= 0xe0 ? 3 : 2;
  char32_t cp = b0 & (0x7f >> len);
  for (int i = 1; i < len && pos + i < text.size(); ++i) {
    cp = (cp << 6) | (static_cast<unsigned char>(text[pos + i]) & 0x3f);
  }
  pos += static_cast<size_t>(len);
  return cp;
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

std::string utf8_sanitize(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    const int len = sequence_length(bytes, pos);
    if (len > 0) {
      out.append(bytes.substr(pos, static_cast<size_t>(len)));
      pos += static_cast<size_t>(len);
    } else {
      out += "\xEF\xBF\xBD";
      ++pos;
    }
  }
  return out;
}

char32_t utf8_next(std::string_view s, size_t& pos) {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  size_t len = 0;
  char32_t cp = 0;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
    cp = b0 & 0x1f;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    cp = b0 & 0x0f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    cp = b0 & 0x07;
  }
  if (len == 0 || pos + len > s.size()) {
    ++pos;
    return b0;
  }
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if ((b & 0xc0) != 0x80) {  // not a continuation byte
      ++pos;
      return b0;
    }
    cp = (cp << 6) | (b & 0x3f);
  }
  pos += len;
  return cp;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0, pos = 0;
  while (pos < s.size()) {
    utf8_next(s, pos);
    ++n;
  }
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  size_t pos = 0;
  while (pos < s.size()) {
    offsets.push_back(pos);
    utf8_next(s, pos);
  }
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace hearth
