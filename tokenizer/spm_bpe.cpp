#include "tokenizer/spm_bpe.h"

#include <cmath>
#include <queue>

#include "common/utf8.h"

namespace hearth {
namespace {

struct Symbol {
  uint32_t begin;
  uint32_t len;
  TokenId id;  // -1 until known
  int32_t prev;
  int32_t next;
};

struct Candidate {
  float score;
  int32_t left;
  int32_t right;
  uint32_t len;  // bytes of the joined piece: tells a stale candidate apart
  TokenId id;
  // Highest score first, then leftmost.
  bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
};

bool mergeable(TokenType t) { return t == TokenType::kNormal || t == TokenType::kUserDefined; }

}  // namespace

Result<SpmModel> SpmModel::build(std::shared_ptr<const TokenizerVocab> vocab, std::vector<float> scores) {
  const std::vector<std::string>& pieces = vocab->pieces;
  const std::vector<TokenType>& types = vocab->types;
  if (types.size() != pieces.size() || scores.size() != pieces.size()) {
    return make_error(ErrorCode::kFormat, "{} pieces but {} types and {} scores", pieces.size(), types.size(),
                      scores.size());
  }
  SpmModel model;
  model.unk_id_ = vocab->unk_id;
  model.byte_ids_.fill(-1);
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (std::isnan(scores[i])) return make_error(ErrorCode::kFormat, "the score of token {} is not a number", i);
    if (types[i] != TokenType::kByte) continue;
    const auto id = static_cast<TokenId>(i);
    if (const auto b = parse_byte_piece(pieces[i]); b && model.byte_ids_[*b] < 0) model.byte_ids_[*b] = id;
  }
  for (const TokenId d : vocab->duplicate_ids) {  // in id order: the first mergeable one stays
    const std::string& piece = pieces[static_cast<size_t>(d)];
    if (!mergeable(types[static_cast<size_t>(d)])) continue;
    const std::optional<TokenId> lowest = vocab->find(piece);
    if (lowest && !mergeable(types[static_cast<size_t>(*lowest)])) model.later_mergeable_.insert(pieces, d);
  }
  model.scores_ = std::move(scores);
  model.vocab_ = std::move(vocab);
  return model;
}

std::optional<TokenId> SpmModel::find(std::string_view piece) const {
  const std::optional<TokenId> id = vocab_->find(piece);
  if (!id) return std::nullopt;
  if (mergeable(vocab_->types[static_cast<size_t>(*id)])) return id;
  return later_mergeable_.find(vocab_->pieces, piece);
}

void SpmModel::encode(std::string_view text, std::vector<TokenId>& out) const {
  if (text.empty()) return;
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = std::min(utf8_sequence_length(static_cast<unsigned char>(text[pos])), text.size() - pos);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({static_cast<uint32_t>(pos), static_cast<uint32_t>(len), -1, index - 1, -1});
    if (index > 0) symbols[static_cast<size_t>(index - 1)].next = index;
    pos += len;
  }

  std::priority_queue<Candidate> queue;
  const auto consider = [this, &symbols, &queue, text](int32_t left) {
    if (left < 0) return;
    const Symbol& l = symbols[static_cast<size_t>(left)];
    if (l.next < 0) return;
    const Symbol& r = symbols[static_cast<size_t>(l.next)];
    const std::optional<TokenId> id = find(text.substr(l.begin, l.len + r.len));
    if (!id) return;
    queue.push({scores_[static_cast<size_t>(*id)], left, l.next, l.len + r.len, *id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<size_t>(c.left)];
    if (left.len == 0 || left.next != c.right) continue;
    Symbol& right = symbols[static_cast<size_t>(c.right)];
    if (right.len == 0 || left.len + right.len != c.len) continue;
    left.len += right.len;
    left.id = c.id;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = c.left;
    right.len = 0;
    consider(left.prev);
    consider(c.left);
  }

  bool last_was_unk = false;
  for (const Symbol& s : symbols) {
    if (s.len == 0) continue;
    TokenId id = s.id;
    if (id < 0) id = find(text.substr(s.begin, s.len)).value_or(-1);
    if (id >= 0) {
      out.push_back(id);
      last_was_unk = false;
      continue;
    }
    // A character with no piece of its own: its bytes, else one unknown token.
    bool all = true;
    for (uint32_t k = 0; k < s.len; ++k) all = all && byte_ids_[static_cast<unsigned char>(text[s.begin + k])] >= 0;
    if (all) {
      for (uint32_t k = 0; k < s.len; ++k) out.push_back(byte_ids_[static_cast<unsigned char>(text[s.begin + k])]);
      last_was_unk = false;
    } else if (unk_id_ >= 0 && !last_was_unk) {
      out.push_back(unk_id_);
      last_was_unk = true;
    }
  }
}

}  // namespace hearth
