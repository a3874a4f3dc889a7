#include "grammar/utf8_ranges.h"

#include <algorithm>

namespace hearth::grammar {

std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::vector<CodeRange> out;
  for (const CodeRange& r : ranges) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges) {
  std::vector<CodeRange> out;
  uint32_t next = 0;
  for (const CodeRange& r : ranges) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

namespace {

int encoded_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Splits [lo, hi] (one encoded length, no surrogates) until every byte position of the
// encodings of lo and hi spans a plain range, then emits those ranges.
void sequences_of(uint32_t lo, uint32_t hi, std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  std::vector<std::pair<uint32_t, uint32_t>> todo{{lo, hi}};
  while (!todo.empty()) {
    auto [a, b] = todo.back();
    todo.pop_back();
    bool split = false;
    for (int i = 1; i < 4 && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((a & ~m) != (b & ~m)) {
        if ((a & m) != 0) {
          todo.emplace_back((a | m) + 1, b);
          todo.emplace_back(a, a | m);
          split = true;
        } else if ((b & m) != m) {
          todo.emplace_back(b & ~m, b);
          todo.emplace_back(a, (b & ~m) - 1);
          split = true;
        }
      }
    }
    if (split) continue;
    std::string ea, eb;
    utf8_append(ea, a);
    utf8_append(eb, b);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (size_t k = 0; k < ea.size(); ++k) {
      seq.emplace_back(static_cast<uint8_t>(ea[k]), static_cast<uint8_t>(eb[k]));
    }
    out.push_back(std::move(seq));
  }
}

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(const std::vector<CodeRange>& ranges) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  for (CodeRange r : ranges) {
    // Cut out the surrogates, then cut at the encoded-length boundaries.
    std::vector<CodeRange> parts;
    if (r.lo < 0xD800 && r.hi >= 0xD800) {
      parts.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) parts.push_back({0xE000, r.hi});
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      if (r.hi > 0xDFFF) parts.push_back({0xE000, r.hi});
    } else {
      parts.push_back(r);
    }
    for (CodeRange p : parts) {
      for (const uint32_t edge : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (p.lo <= edge && p.hi > edge) {
          sequences_of(p.lo, edge, out);
          p.lo = edge + 1;
        }
      }
      if (encoded_length(p.lo) == encoded_length(p.hi)) sequences_of(p.lo, p.hi, out);
    }
  }
  return out;
}

}  // namespace hearth::grammar
