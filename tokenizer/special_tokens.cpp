#include "tokenizer/special_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "common/utf8.h"

namespace hearth {
namespace {

constexpr size_t kMaxTrieNodes = size_t{1} << 22;

// Start of the character that ends at `end` (exclusive).
size_t previous_char(std::string_view text, size_t end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
  return start;
}

char32_t char_at(std::string_view text, size_t pos) { return utf8_decode(text, pos); }

bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }
bool is_word(char32_t c) { return c == U'_' || u_isalnum(static_cast<UChar32>(c)) != 0; }

}  // namespace

Status SpecialTokenMatcher::add(AddedToken token) {
  if (token.content.empty()) return Status::ok();
  if (nodes_.empty()) nodes_.emplace_back();
  if (nodes_.size() + token.content.size() > kMaxTrieNodes) {
    return make_error(ErrorCode::kResourceExhausted, "the added tokens are too many or too long ({} bytes of trie)",
                      kMaxTrieNodes);
  }
  int32_t node = 0;
  for (const char c : token.content) {
    const auto byte = static_cast<uint8_t>(c);
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[static_cast<size_t>(node)].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1})),
                      {byte, next});
    }
    node = next;
  }
  first_byte_[static_cast<uint8_t>(token.content[0])] = true;
  Node& leaf = nodes_[static_cast<size_t>(node)];
  if (leaf.token >= 0) return Status::ok();  // the same text twice: the first one wins
  leaf.token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(std::move(token));
  return Status::ok();
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[static_cast<size_t>(node)].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{-1}));
  return (it != children.end() && it->first == byte) ? it->second : -1;
}

bool SpecialTokenMatcher::word_boundary_ok(std::string_view text, size_t begin, size_t end) const {
  if (begin > 0 && is_word(char_at(text, previous_char(text, begin)))) return false;
  if (end < text.size() && is_word(char_at(text, end))) return false;
  return true;
}

void SpecialTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Piece>& out) const {
  size_t text_begin = 0;  // start of the pending text piece
  size_t pos = 0;
  std::vector<std::pair<size_t, int32_t>> candidates;  // (end, token index), shortest first
  while (pos < text.size()) {
    const auto lead = static_cast<uint8_t>(text[pos]);
    if (tokens_.empty() || !first_byte_[lead] || (lead & 0xc0) == 0x80) {
      ++pos;
      continue;
    }
    candidates.clear();
    int32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node < 0) break;
      const int32_t t = nodes_[static_cast<size_t>(node)].token;
      if (t >= 0 && (parse_special || !tokens_[static_cast<size_t>(t)].special)) candidates.emplace_back(i + 1, t);
    }
    bool matched = false;
    for (auto it = candidates.rbegin(); it != candidates.rend(); ++it) {
      const AddedToken& token = tokens_[static_cast<size_t>(it->second)];
      size_t begin = pos, end = it->first;
      // A match must not end inside a character (contents are whole characters, so
      // this only guards odd vocabularies).
      if (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xc0) == 0x80) continue;
      if (token.single_word && !word_boundary_ok(text, begin, end)) continue;
      if (token.lstrip) {
        while (begin > text_begin) {
          const size_t prev = previous_char(text, begin);
          if (!is_space(char_at(text, prev))) break;
          begin = prev;
        }
      }
      if (token.rstrip) {
        while (end < text.size()) {
          size_t next = end;
          if (!is_space(utf8_decode(text, next))) break;
          end = next;
        }
      }
      if (begin > text_begin) out.push_back({text_begin, begin, -1});
      out.push_back({begin, end, token.id});
      text_begin = pos = end;
      matched = true;
      break;
    }
    if (!matched) ++pos;
  }
  if (text.size() > text_begin) out.push_back({text_begin, text.size(), -1});
}

}  // namespace hearth
