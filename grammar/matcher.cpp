#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <unordered_set>

namespace hearth::grammar {

int32_t TokenMask::count() const {
  int32_t n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

void mask_logits(const TokenMask& mask, std::span<float> logits) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t w = 0; w * 64 < n; ++w) {
    const uint64_t bits = w < mask.words.size() ? mask.words[w] : 0;
    if (bits == ~uint64_t{0}) continue;
    const size_t end = std::min(n, w * 64 + 64);
    for (size_t i = w * 64; i < end; ++i) {
      if (((bits >> (i - w * 64)) & 1u) == 0) logits[i] = kNegInf;
    }
  }
}

// ---- CompiledGrammar -------------------------------------------------------------------

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocabulary,
                                 const MatcherLimits& limits)
    : grammar_(std::move(grammar)), vocabulary_(std::move(vocabulary)), limits_(limits) {}

Result<std::shared_ptr<CompiledGrammar>> CompiledGrammar::create(Grammar grammar,
                                                                 std::shared_ptr<const Vocabulary> vocabulary,
                                                                 const MatcherLimits& limits) {
  std::shared_ptr<CompiledGrammar> g(new CompiledGrammar(std::move(grammar), std::move(vocabulary), limits));
  g->rest_ = g->grammar_.min_rest(g->vocabulary_->single_bytes());
  g->nodes_.push_back(Node{.pos = 0, .parent = kNoParent, .succ_begin = 0, .succ_count = 0, .dist = 0});  // kAccept
  g->by_depth_.resize(g->vocabulary_->max_token_bytes() + 1);
  HEARTH_RETURN_IF_ERROR(g->expand(g->grammar_.start(), kNoParent, g->initial_));
  return g;
}

int32_t CompiledGrammar::min_output_bytes() const { return rest_[grammar_.start()]; }

uint32_t CompiledGrammar::intern(uint32_t pos, uint32_t parent) {
  const uint64_t key = (uint64_t{pos} << 32) | parent;
  const auto [it, inserted] = interned_.try_emplace(key, static_cast<uint32_t>(nodes_.size()));
  if (inserted) nodes_.push_back(Node{.pos = pos, .parent = parent});
  return it->second;
}

// Every stack that `pos` over `parent` stands for once rules are expanded and finished
// alternatives popped: tops that are byte sets, or kAccept.
Status CompiledGrammar::expand(uint32_t pos, uint32_t parent, std::vector<uint32_t>& out) {
  out.clear();
  work_.clear();
  std::unordered_set<uint64_t> seen;
  auto push = [&](uint32_t p, uint32_t par) {
    if (seen.insert((uint64_t{p} << 32) | par).second) {
      work_.push_back(p);
      work_.push_back(par);
    }
  };
  push(pos, parent);
  while (!work_.empty()) {
    const uint32_t par = work_.back();
    work_.pop_back();
    const uint32_t p = work_.back();
    work_.pop_back();
    const Element e = grammar_.element(p);
    switch (e.kind) {
      case ElementKind::kBytes:
        out.push_back(intern(p, par));
        break;
      case ElementKind::kEnd:
        if (par == kNoParent) {
          out.push_back(kAccept);
        } else {
          push(nodes_[par].pos, nodes_[par].parent);
        }
        break;
      case ElementKind::kRule: {
        // A reference in tail position pushes nothing: right recursion runs in constant depth.
        const uint32_t next = grammar_.element(p + 1).kind == ElementKind::kEnd ? par : intern(p + 1, par);
        for (uint32_t a : grammar_.alternatives(e.value)) push(a, next);
        break;
      }
    }
    if (out.size() > limits_.max_stacks || seen.size() > limits_.max_stacks * 64) {
      return make_error(ErrorCode::kResourceExhausted,
                        "the grammar is too ambiguous: more than {} parses are open at once", limits_.max_stacks);
    }
    if (nodes_.size() > limits_.max_nodes) {
      return make_error(ErrorCode::kResourceExhausted, "the grammar needs more than {} parse stacks",
                        limits_.max_nodes);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return Status::ok();
}

Status CompiledGrammar::successors(uint32_t node) {
  if (nodes_[node].succ_count != UINT32_MAX) return Status::ok();
  std::vector<uint32_t> out;
  HEARTH_RETURN_IF_ERROR(expand(nodes_[node].pos + 1, nodes_[node].parent, out));
  nodes_[node].succ_begin = static_cast<uint32_t>(succ_pool_.size());
  nodes_[node].succ_count = static_cast<uint32_t>(out.size());
  succ_pool_.insert(succ_pool_.end(), out.begin(), out.end());
  return Status::ok();
}

Status CompiledGrammar::advance(std::span<const uint32_t> state, uint8_t byte, std::vector<uint32_t>& out) {
  out.clear();
  size_t sources = 0;
  for (uint32_t n : state) {
    if (n == kAccept) continue;
    const Element& e = grammar_.element(nodes_[n].pos);
    if (!grammar_.byte_set(e.value).test(byte)) continue;
    HEARTH_RETURN_IF_ERROR(successors(n));
    const Node& node = nodes_[n];
    out.insert(out.end(), succ_pool_.begin() + node.succ_begin, succ_pool_.begin() + node.succ_begin + node.succ_count);
    ++sources;
  }
  if (sources > 1) {
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    if (out.size() > limits_.max_stacks) {
      return make_error(ErrorCode::kResourceExhausted,
                        "the grammar is too ambiguous: more than {} parses are open at once", limits_.max_stacks);
    }
  }
  return Status::ok();
}

int32_t CompiledGrammar::dist(uint32_t node) {
  if (nodes_[node].dist >= 0) return nodes_[node].dist;
  // Up to the first node whose distance is known (or the bottom), then back down.
  std::vector<uint32_t> chain;
  uint32_t n = node;
  while (n != kNoParent && nodes_[n].dist < 0) {
    chain.push_back(n);
    n = nodes_[n].parent;
  }
  int32_t below = n == kNoParent ? 0 : nodes_[n].dist;
  for (size_t i = chain.size(); i-- > 0;) {
    below = static_cast<int32_t>(std::min<int64_t>(int64_t{rest_[nodes_[chain[i]].pos]} + below, kUnreachable));
    nodes_[chain[i]].dist = below;
  }
  return nodes_[node].dist;
}

int32_t CompiledGrammar::cost(std::span<const uint32_t> state) {
  if (state.size() == 1 && state[0] == kAccept) return 0;
  int32_t best = kUnreachable;
  for (uint32_t n : state) best = std::min(best, dist(n));
  return best >= kUnreachable ? kUnreachable : best + 1;  // and the end token
}

Status CompiledGrammar::walk(std::span<const uint32_t> state, std::vector<uint64_t>& words, int32_t& max_cost,
                             std::vector<std::pair<int32_t, int32_t>>* costs) {
  const auto trie = vocabulary_->trie();
  words.assign((static_cast<size_t>(vocabulary_->size()) + 63) / 64, 0);
  max_cost = 0;
  by_depth_[0].assign(state.begin(), state.end());
  size_t i = 0;
  while (i < trie.size()) {
    const Vocabulary::TrieNode& t = trie[i];
    std::vector<uint32_t>& next = by_depth_[t.depth];
    HEARTH_RETURN_IF_ERROR(advance(by_depth_[t.depth - 1], t.byte, next));
    if (next.empty()) {
      i = t.subtree_end;
      continue;
    }
    if (t.tokens_count > 0) {
      const int32_t c = cost(next);
      max_cost = std::max(max_cost, c);
      for (int32_t id : vocabulary_->trie_tokens(t)) {
        words[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
        if (costs != nullptr) costs->emplace_back(id, c);
      }
    }
    ++i;
  }
  return Status::ok();
}

Result<const CompiledGrammar::CacheEntry*> CompiledGrammar::entry(std::span<const uint32_t> state) {
  std::string key(reinterpret_cast<const char*>(state.data()), state.size() * sizeof(uint32_t));
  const auto it = cache_.find(key);
  if (it != cache_.end()) {
    ++cache_hits_;
    return &it->second;
  }
  ++cache_misses_;
  CacheEntry e;
  HEARTH_RETURN_IF_ERROR(walk(state, e.words, e.max_cost_after, nullptr));
  if (cache_.size() >= limits_.mask_cache_entries) cache_.clear();
  return &cache_.emplace(std::move(key), std::move(e)).first->second;
}

// ---- GrammarMatcher --------------------------------------------------------------------

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar, std::vector<int32_t> end_tokens)
    : g_(std::move(grammar)), end_tokens_(std::move(end_tokens)), state_(g_->initial_) {}

bool GrammarMatcher::is_end_token(int32_t token) const {
  return std::find(end_tokens_.begin(), end_tokens_.end(), token) != end_tokens_.end();
}

bool GrammarMatcher::accepting() const {
  return ended_ || std::binary_search(state_.begin(), state_.end(), CompiledGrammar::kAccept);
}

bool GrammarMatcher::terminated() const {
  return ended_ || (state_.size() == 1 && state_[0] == CompiledGrammar::kAccept);
}

int32_t GrammarMatcher::cost() const { return ended_ ? 0 : g_->cost(state_); }

Status GrammarMatcher::fill_mask(TokenMask& mask, int32_t tokens_left) {
  const int32_t vocab = g_->vocabulary().size();
  if (ended_) {
    mask.reset(vocab);
    return Status::ok();
  }
  HEARTH_ASSIGN_OR_RETURN(const CompiledGrammar::CacheEntry* e, g_->entry(state_));
  const bool can_end = accepting();
  const int32_t after = tokens_left - 1;  // tokens left once this one is produced
  if (tokens_left <= 0 || e->max_cost_after <= after) {
    mask.words = e->words;
  } else {
    // Near the end of the budget: only tokens after which the output can still end in
    // time, or, when none can, those that come closest.
    costs_.clear();
    std::vector<uint64_t> words;
    int32_t max_cost = 0;
    HEARTH_RETURN_IF_ERROR(g_->walk(state_, words, max_cost, &costs_));
    int32_t best = can_end ? 0 : kUnreachable;
    for (const auto& [id, c] : costs_) best = std::min(best, c);
    const int32_t limit = std::max(after, best);
    mask.reset(vocab);
    for (const auto& [id, c] : costs_) {
      if (c <= limit) mask.set(id);
    }
  }
  for (int32_t id : end_tokens_) {
    if (id < 0 || id >= vocab) continue;
    if (can_end) {
      mask.set(id);
    } else {
      mask.clear(id);
    }
  }
  return Status::ok();
}

Status GrammarMatcher::accept(int32_t token) {
  if (ended_) return make_error(ErrorCode::kOutOfRange, "the output is complete; token {} cannot follow", token);
  if (is_end_token(token)) {
    if (!accepting()) {
      return make_error(ErrorCode::kOutOfRange, "the output does not match the grammar yet; it cannot end here");
    }
    ended_ = true;
    return Status::ok();
  }
  const Vocabulary& v = g_->vocabulary();
  if (token < 0 || token >= v.size() || v.bytes(token).empty()) {
    return make_error(ErrorCode::kOutOfRange, "token {} is not text the grammar can match", token);
  }
  scratch_ = state_;
  for (const char c : v.bytes(token)) {
    HEARTH_RETURN_IF_ERROR(g_->advance(scratch_, static_cast<uint8_t>(c), scratch2_));
    if (scratch2_.empty()) return make_error(ErrorCode::kOutOfRange, "the grammar does not allow token {}", token);
    std::swap(scratch_, scratch2_);
  }
  std::swap(state_, scratch_);
  return Status::ok();
}

}  // namespace hearth::grammar
