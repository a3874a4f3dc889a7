#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

namespace hearth::grammar {

namespace {
// Longer tokens would make the depth field overflow; no real vocabulary comes close.
constexpr size_t kMaxTokenBytes = 4096;
}  // namespace

Result<Vocabulary> Vocabulary::build(std::vector<std::string> bytes) {
  Vocabulary v;
  if (bytes.empty()) return make_error(ErrorCode::kInvalidArgument, "the vocabulary is empty");
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i].size() > kMaxTokenBytes) {
      return make_error(ErrorCode::kInvalidArgument, "token {} has {} bytes; at most {} are supported", i,
                        bytes[i].size(), kMaxTokenBytes);
    }
    if (bytes[i].empty()) continue;
    order.push_back(static_cast<int32_t>(i));
    v.max_token_bytes_ = std::max(v.max_token_bytes_, bytes[i].size());
    if (bytes[i].size() == 1) v.single_bytes_.set(static_cast<uint8_t>(bytes[i][0]));
  }
  // Sorted byte strings list the trie in preorder: a node is a distinct prefix, and it
  // first appears right after its parent's.
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const std::string& x = bytes[static_cast<size_t>(a)];
    const std::string& y = bytes[static_cast<size_t>(b)];
    return std::lexicographical_compare(x.begin(), x.end(), y.begin(), y.end(), [](char p, char q) {
      return static_cast<unsigned char>(p) < static_cast<unsigned char>(q);
    });
  });
  std::vector<uint32_t> path;  // preorder indices of the nodes along the previous string
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view s = bytes[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < prev.size() && common < s.size() && prev[common] == s[common]) ++common;
    // Close the subtrees the previous string went into and this one does not.
    while (path.size() > common) {
      v.trie_[path.back()].subtree_end = static_cast<uint32_t>(v.trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode n;
      n.byte = static_cast<uint8_t>(s[d]);
      n.depth = static_cast<uint16_t>(d + 1);
      n.tokens_begin = static_cast<uint32_t>(v.trie_tokens_.size());
      path.push_back(static_cast<uint32_t>(v.trie_.size()));
      v.trie_.push_back(n);
    }
    // Equal strings (two ids with the same bytes) share the node; their ids are adjacent.
    TrieNode& end = v.trie_[path.back()];
    if (end.tokens_count == 0) end.tokens_begin = static_cast<uint32_t>(v.trie_tokens_.size());
    v.trie_tokens_.push_back(id);
    ++end.tokens_count;
    prev = s;
  }
  while (!path.empty()) {
    v.trie_[path.back()].subtree_end = static_cast<uint32_t>(v.trie_.size());
    path.pop_back();
  }
  v.bytes_ = std::move(bytes);
  return v;
}

}  // namespace hearth::grammar
