// Grammar: a context-free grammar over bytes, parsed from GBNF text, in the flat form the
// matcher walks (grammar/matcher.h).
//
// GBNF is llama.cpp's grammar notation: rules `name ::= alternatives`, string literals
// ("..." with \n \t \r \\ \" \xHH \uHHHH \UHHHHHHHH escapes), character classes ([a-z],
// [^"\\], escapes as in literals), `.` (any character), groups, postfix `*` `+` `?`
// `{m}` `{m,}` `{m,n}`, and `#` comments. Text is UTF-8; characters outside ASCII in
// classes and `.` become their UTF-8 byte sequences, so the compiled grammar speaks bytes
// only. A rule ends where the next `name ::=` begins.
//
// Compiled form: every rule is a list of alternatives, each a sequence of elements ended
// by kEnd in one flat array; an element is a byte set or a reference to a rule.
// Repetitions become right-recursive rules (x{0,n} as n nested optionals), so nothing
// counts at run time. Left-recursive rules are refused (the matcher would expand them
// forever); so are undefined names, a missing root and grammars past the limits.
//
// A Grammar is immutable after parse(): thread-safe to share.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth::grammar {

// A set of byte values.
struct ByteSet {
  std::array<uint64_t, 4> words{};
  bool test(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1u; }
  void set(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void set_range(uint8_t lo, uint8_t hi) {
    for (unsigned b = lo; b <= hi; ++b) set(static_cast<uint8_t>(b));
  }
  bool intersects(const ByteSet& o) const {
    return (words[0] & o.words[0]) | (words[1] & o.words[1]) | (words[2] & o.words[2]) | (words[3] & o.words[3]);
  }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

enum class ElementKind : uint8_t {
  kEnd = 0,    // the end of an alternative
  kBytes = 1,  // one byte out of a set: value is a byte-set index
  kRule = 2,   // a rule: value is its index
};

struct Element {
  ElementKind kind = ElementKind::kEnd;
  uint32_t value = 0;
};

struct GrammarLimits {
  size_t max_text_bytes = 1u << 20;    // GBNF source
  size_t max_elements = 4u << 20;      // compiled elements, repetitions expanded
  int64_t max_repetition = 1'000'000;  // m and n of {m,n}
};

// Minimal lengths are in bytes; a rule that cannot be matched with the allowed bytes
// has kUnreachable.
inline constexpr int32_t kUnreachable = std::numeric_limits<int32_t>::max() / 4;

class Grammar {
 public:
  // Parses GBNF text whose start rule is `root`. Errors are kInvalidArgument naming the
  // line and column (syntax), the rule (undefined, left-recursive), or the limit.
  static Result<Grammar> parse(std::string_view text, std::string_view root = "root",
                               const GrammarLimits& limits = {});

  // The position of the start: an element referring to the root rule, then kEnd.
  uint32_t start() const { return start_; }
  const Element& element(uint32_t pos) const { return elements_[pos]; }
  size_t n_elements() const { return elements_.size(); }
  size_t n_rules() const { return rule_alts_.size() - 1; }
  // Element positions where the alternatives of `rule` begin.
  std::span<const uint32_t> alternatives(uint32_t rule) const {
    return {alt_starts_.data() + rule_alts_[rule], alt_starts_.data() + rule_alts_[rule + 1]};
  }
  const ByteSet& byte_set(uint32_t index) const { return sets_[index]; }
  size_t n_byte_sets() const { return sets_.size(); }
  const std::string& rule_name(uint32_t rule) const { return names_[rule]; }

  // rest[pos]: the fewest bytes that complete the alternative from `pos` to its kEnd,
  // using bytes of `allowed` only (kUnreachable when impossible). One entry per element.
  std::vector<int32_t> min_rest(const ByteSet& allowed) const;
  // The fewest bytes of a whole match of the grammar with bytes of `allowed` only.
  int32_t min_length(const ByteSet& allowed) const;

 private:
  Grammar() = default;
  friend class GrammarBuilder;

  std::vector<Element> elements_;
  std::vector<uint32_t> alt_starts_;
  std::vector<uint32_t> rule_alts_;  // rule r's alternatives: alt_starts_[rule_alts_[r]..rule_alts_[r+1])
  std::vector<ByteSet> sets_;
  std::vector<std::string> names_;
  uint32_t start_ = 0;
};

// A GBNF string literal for `bytes` ("a\"b\n"): bytes outside printable ASCII as \xHH.
std::string gbnf_literal(std::string_view bytes);

}  // namespace hearth::grammar
