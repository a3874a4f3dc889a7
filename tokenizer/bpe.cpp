#include "tokenizer/bpe.h"

#include <queue>

#include "common/utf8.h"

namespace hearth {
namespace {

struct Symbol {
  TokenId id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  int32_t rank;
  int32_t left;
  int32_t right;
  TokenId left_id;
  TokenId right_id;
  TokenId result;
  // Lowest rank first, then leftmost.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
};

}  // namespace

Result<BpeModel> BpeModel::build(PieceMap model_vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                 BpeOptions options) {
  BpeModel model;
  model.vocab_ = std::move(model_vocab);
  model.options_ = std::move(options);
  if (static_cast<int64_t>(merges.size()) > kMaxMerges) {
    return make_error(ErrorCode::kFormat, "{} merges is more than the {} accepted", merges.size(), kMaxMerges);
  }
  const size_t prefix_len = model.options_.continuing_subword_prefix.size();
  model.merges_.reserve(merges.size());
  std::string joined;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const auto ia = model.vocab_.find(a);
    const auto ib = model.vocab_.find(b);
    if (ia == model.vocab_.end() || ib == model.vocab_.end()) {
      return make_error(ErrorCode::kFormat, "merge {} (\"{}\" \"{}\") names a piece that is not in the vocabulary",
                        rank, a, b);
    }
    joined.assign(a);
    if (prefix_len > 0 && b.compare(0, prefix_len, model.options_.continuing_subword_prefix) == 0) {
      joined.append(b, prefix_len, std::string::npos);
    } else {
      joined.append(b);
    }
    const auto ir = model.vocab_.find(joined);
    if (ir == model.vocab_.end()) {
      return make_error(ErrorCode::kFormat, "merge {} (\"{}\" \"{}\") makes \"{}\", which is not in the vocabulary",
                        rank, a, b, joined);
    }
    // A repeated pair takes its last rank, as Hugging Face's loader does.
    model.merges_[key(ia->second, ib->second)] = Merge{static_cast<int32_t>(rank), ir->second};
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = model.vocab_.find(byte_piece(static_cast<uint8_t>(b)));
    model.byte_ids_[static_cast<size_t>(b)] = (it == model.vocab_.end()) ? -1 : it->second;
  }
  return model;
}

void BpeModel::encode(std::string_view word, std::vector<TokenId>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const std::string& prefix = options_.continuing_subword_prefix;
  const std::string& suffix = options_.end_of_word_suffix;
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  bool last_was_unk = false;
  std::string lookup;
  const auto push = [&symbols](TokenId id) {
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
  };
  for (size_t pos = 0; pos < word.size();) {
    const size_t len = std::min(utf8_sequence_length(static_cast<unsigned char>(word[pos])), word.size() - pos);
    const std::string_view ch = word.substr(pos, len);
    const bool first = pos == 0;
    pos += len;
    const bool last = pos == word.size();
    PieceMap::const_iterator it;
    if ((first || prefix.empty()) && (!last || suffix.empty())) {
      it = vocab_.find(ch);
    } else {
      lookup.clear();
      if (!first) lookup.append(prefix);
      lookup.append(ch);
      if (last) lookup.append(suffix);
      it = vocab_.find(lookup);
    }
    if (it != vocab_.end()) {
      push(it->second);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch) push(byte_ids_[static_cast<unsigned char>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (!(options_.fuse_unk && last_was_unk)) push(options_.unk_id);
      last_was_unk = true;
    }
  }

  std::priority_queue<Candidate> queue;
  const auto consider = [this, &symbols, &queue](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const TokenId a = symbols[static_cast<size_t>(left)].id, b = symbols[static_cast<size_t>(right)].id;
    const auto it = merges_.find(key(a, b));
    if (it == merges_.end()) return;
    queue.push({it->second.rank, left, right, a, b, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    if (!left.alive || left.next != c.right || left.id != c.left_id) continue;
    Symbol& right = symbols[static_cast<size_t>(c.right)];
    if (!right.alive || right.id != c.right_id) continue;
    left.id = c.result;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    right.alive = false;
    consider(left.prev);
    consider(c.left);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace hearth
