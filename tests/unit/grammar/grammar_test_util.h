// Helpers of the grammar tests: a byte vocabulary, whole-string matching, random walks.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/vocabulary.h"

namespace hearth::grammar::testing {

// Ids 0..255: the single bytes; 256: the end token (no bytes); then `extra` strings.
inline std::shared_ptr<const Vocabulary> byte_vocabulary(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  bytes.emplace_back();
  for (const std::string& e : extra) bytes.push_back(e);
  auto v = Vocabulary::build(std::move(bytes));
  return std::make_shared<const Vocabulary>(std::move(v).value());
}
inline constexpr int32_t kEnd = 256;

inline std::shared_ptr<CompiledGrammar> compile(std::string_view gbnf, std::shared_ptr<const Vocabulary> vocab) {
  auto g = Grammar::parse(gbnf);
  if (!g.is_ok()) return nullptr;
  auto c = CompiledGrammar::create(std::move(g).value(), std::move(vocab));
  return c.is_ok() ? *c : nullptr;
}

// Whether the whole of `text` matches, fed byte by byte.
inline bool full_match(const std::shared_ptr<CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g, {kEnd});
  for (const char c : text) {
    if (!m.accept(static_cast<uint8_t>(c)).is_ok()) return false;
  }
  return m.accepting();
}

// A random walk through the grammar: uniformly random allowed tokens within a budget of
// `max_tokens`. Returns the text, and whether it ended (end token or terminated).
struct Walk {
  std::string text;
  bool ended = false;
  int32_t tokens = 0;
  Status error;
};
inline Walk random_walk(const std::shared_ptr<CompiledGrammar>& g, std::mt19937_64& rng, int32_t max_tokens,
                        double end_bias = 0.0) {
  Walk w;
  GrammarMatcher m(g, {kEnd});
  TokenMask mask;
  const Vocabulary& v = g->vocabulary();
  std::vector<int32_t> allowed;
  while (w.tokens < max_tokens) {
    if (Status st = m.fill_mask(mask, max_tokens - w.tokens); !st.is_ok()) {
      w.error = st;
      return w;
    }
    allowed.clear();
    for (int32_t id = 0; id < v.size(); ++id) {
      if (mask.test(id)) allowed.push_back(id);
    }
    if (allowed.empty()) {
      w.error = make_error(ErrorCode::kInternal, "no token allowed after \"{}\"", w.text);
      return w;
    }
    int32_t pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (mask.test(kEnd) && std::uniform_real_distribution<double>(0, 1)(rng) < end_bias) pick = kEnd;
    ++w.tokens;
    if (Status st = m.accept(pick); !st.is_ok()) {
      w.error = st;
      return w;
    }
    if (pick == kEnd) {
      w.ended = true;
      return w;
    }
    w.text += v.bytes(pick);
    if (m.terminated()) {
      w.ended = true;
      return w;
    }
  }
  return w;
}

}  // namespace hearth::grammar::testing
