// Constrained decoding: which tokens a grammar allows next, and advancing it by the token
// sampled.
//
// A CompiledGrammar binds a Grammar to a Vocabulary. The matcher's state is a set of
// parse stacks; a stack is a node of a shared, hash-consed tree (its top position in the
// grammar and its parent), so equal stacks are one id and a state is a short sorted list
// of ids. Each node's moves on a byte are computed once (they depend only on whether the
// byte is in the top element's set), and the tokens a state allows are found by one
// depth-first pass over the vocabulary trie that skips every subtree the grammar rules
// out; that mask is cached per state, since generation revisits the same states (every
// character inside a JSON string is the same state).
//
// Budget: with `tokens_left`, a token is allowed only if the output can still be
// completed in the tokens left after it (counting one token per byte, over the bytes
// that are tokens of their own, plus one for the end token unless the output is then
// complete), so a constrained output always ends valid within max_tokens when that is
// possible at all, and otherwise takes the shortest way to an end. Trailing runs of
// whitespace or digits cannot go on forever either: the grammar's own bounds (JSON's
// whitespace rule) and the budget end them.
//
// Thread-safety: a CompiledGrammar and its matchers belong to one thread (the engine's
// step loop): computing masks fills shared caches.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace hearth::grammar {

// One bit per token id.
struct TokenMask {
  std::vector<uint64_t> words;
  void reset(int32_t vocab_size) { words.assign((static_cast<size_t>(vocab_size) + 63) / 64, 0); }
  bool test(int32_t id) const { return (words[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1u; }
  void set(int32_t id) { words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }
  void clear(int32_t id) { words[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63)); }
  int32_t count() const;
};

// Sets every logit whose token the mask leaves out to -infinity.
void mask_logits(const TokenMask& mask, std::span<float> logits);

struct MatcherLimits {
  size_t max_stacks = 2048;         // stacks in one state (ambiguous grammars multiply them)
  size_t max_nodes = 4u << 20;      // distinct stacks of a compiled grammar
  size_t mask_cache_entries = 512;  // masks kept per compiled grammar
};

class CompiledGrammar {
 public:
  static Result<std::shared_ptr<CompiledGrammar>> create(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                                         const MatcherLimits& limits = {});

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocabulary() const { return *vocabulary_; }
  // Fewest bytes of a complete output, over bytes that are tokens of their own
  // (kUnreachable: this vocabulary cannot express the grammar that way).
  int32_t min_output_bytes() const;
  size_t cached_masks() const { return cache_.size(); }
  uint64_t cache_hits() const { return cache_hits_; }
  uint64_t cache_misses() const { return cache_misses_; }

 private:
  friend class GrammarMatcher;
  static constexpr uint32_t kAccept = 0;  // the empty stack: the grammar is matched
  static constexpr uint32_t kNoParent = UINT32_MAX;

  struct Node {
    uint32_t pos = 0;     // top of the stack: a kBytes element (a parent: where to go on)
    uint32_t parent = kNoParent;
    uint32_t succ_begin = 0;
    uint32_t succ_count = UINT32_MAX;  // not computed yet
    int32_t dist = -1;                 // fewest bytes to an empty stack; -1: not computed
  };
  struct CacheEntry {
    std::vector<uint64_t> words;  // tokens allowed, end tokens aside
    int32_t max_cost_after = 0;   // the largest cost() after any of them
  };

  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary, const MatcherLimits& limits);
  uint32_t intern(uint32_t pos, uint32_t parent);
  Status expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out);
  Status successors(uint32_t node);
  // The state after `byte` from `state`, into `out` (sorted, unique).
  Status advance(std::span<const uint32_t> state, uint8_t byte, std::vector<uint32_t>& out);
  int32_t dist(uint32_t node);
  int32_t cost(std::span<const uint32_t> state);
  // Every token `state` allows, with the cost after each when `costs` is given.
  Status walk(std::span<const uint32_t> state, std::vector<uint64_t>& words, int32_t& max_cost,
              std::vector<std::pair<int32_t, int32_t>>* costs);
  Result<const CacheEntry*> entry(std::span<const uint32_t> state);

  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocabulary_;
  MatcherLimits limits_;
  std::vector<int32_t> rest_;  // Grammar::min_rest over the vocabulary's single bytes
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> interned_;
  std::vector<uint32_t> succ_pool_;
  std::vector<uint32_t> initial_;
  std::vector<std::vector<uint32_t>> by_depth_;  // walk's states along the trie path
  std::vector<uint32_t> work_;
  std::unordered_map<std::string, CacheEntry> cache_;
  uint64_t cache_hits_ = 0, cache_misses_ = 0;
};

// One sequence's position in a grammar.
class GrammarMatcher {
 public:
  // `end_tokens`: the ids that end the sequence (EOS, EOT, ...), allowed once the grammar
  // is matched.
  GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> end_tokens);

  // The tokens allowed next into `mask` (sized to the vocabulary). `tokens_left`: how many
  // tokens the sequence may still produce, this one included; 0 or less: no limit.
  Status fill_mask(TokenMask& mask, int32_t tokens_left);
  // Advances by `token`; kOutOfRange (state unchanged) when the grammar does not allow it.
  Status accept(int32_t token);
  // The grammar is matched: an end token may come.
  bool accepting() const;
  // Matched, and nothing may follow: the output is complete (or an end token came).
  bool terminated() const;
  // Tokens still needed at least to end validly (see the budget above).
  int32_t cost() const;
  bool is_end_token(int32_t token) const;

 private:
  std::shared_ptr<CompiledGrammar> g_;
  std::vector<int32_t> end_tokens_;
  std::vector<uint32_t> state_;
  std::vector<uint32_t> scratch_, scratch2_;
  std::vector<std::pair<int32_t, int32_t>> costs_;
  bool ended_ = false;
};

}  // namespace hearth::grammar
