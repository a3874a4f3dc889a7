// Code point ranges and their UTF-8 byte sequences: how grammar classes over Unicode
// become byte-level elements. Internal to grammar/.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/utf8.h"  // utf8_append

namespace hearth::grammar {

struct CodeRange {
  uint32_t lo = 0, hi = 0;  // inclusive
  auto operator<=>(const CodeRange&) const = default;
};

// Sorted, merged ranges.
std::vector<CodeRange> normalize_ranges(std::vector<CodeRange> ranges);
// Every code point (surrogates excluded) outside normalised `ranges`.
std::vector<CodeRange> complement_ranges(const std::vector<CodeRange>& ranges);
// The UTF-8 encodings of the code points in normalised `ranges` (surrogates left out), as
// sequences of byte ranges: a code point's encoding matches exactly one sequence.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(const std::vector<CodeRange>& ranges);

}  // namespace hearth::grammar
