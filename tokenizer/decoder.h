// Decoder: a Hugging Face decoder chain (ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace) turned into what hearth needs: the bytes each token adds to the text, and
// whether one leading space is dropped at the start of a text. Chains that cannot be
// expressed that way are refused when added. Immutable after load; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"

namespace hearth {

class Decoder {
 public:
  // Steps in chain order.
  void add_byte_level();
  Status add_replace(std::string pattern, std::string content);
  void add_byte_fallback();
  void add_fuse();
  Status add_strip(std::string content, int64_t start, int64_t stop);
  void add_metaspace(std::string replacement, bool strip_first);

  // The bytes that token `piece` contributes to decoded text.
  std::string token_bytes(std::string_view piece) const;
  bool strips_leading_space() const { return strips_leading_space_; }

 private:
  struct ByteLevel {};
  struct Replace {
    std::string pattern, content;
  };
  struct ByteFallback {};
  struct Strip {
    std::string content;
    int64_t start, stop;
  };
  struct Metaspace {
    std::string replacement;
  };
  using Step = std::variant<ByteLevel, Replace, ByteFallback, Strip, Metaspace>;

  std::vector<Step> steps_;
  bool fused_ = false;  // a Fuse came: later steps see the whole text
  bool strips_leading_space_ = false;
};

}  // namespace hearth
