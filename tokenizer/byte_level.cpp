#include "tokenizer/byte_level.h"

#include <array>

#include "common/utf8.h"

namespace hearth {
namespace {

struct Tables {
  std::array<std::string, 256> to_char;  // byte -> UTF-8 of its character
  std::array<int16_t, 512> to_byte{};    // code point (< 512) -> byte, or -1

  Tables() {
    to_byte.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
      utf8_append(to_char[static_cast<size_t>(b)], cp);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables kTables;
  return kTables;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out.append(t.to_char[static_cast<unsigned char>(c)]);
  return out;
}

bool byte_level_decode(std::string_view piece, std::string& out) {
  const Tables& t = tables();
  if (!utf8_is_valid(piece)) return false;
  const size_t start = out.size();
  size_t pos = 0;
  while (pos < piece.size()) {
    const char32_t cp = utf8_decode(piece, pos);
    if (cp >= t.to_byte.size() || t.to_byte[cp] < 0) {
      out.resize(start);
      return false;
    }
    out.push_back(static_cast<char>(t.to_byte[cp]));
  }
  return true;
}

}  // namespace hearth
