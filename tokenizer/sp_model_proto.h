// The few fields of a SentencePiece ModelProto that the SentencePiece library's API does
// not expose (piece types such as USER_DEFINED, the normalizer flags), read straight from
// the protobuf wire format with every length checked. Pure parsing; thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "common/status.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

struct SpModelInfo {
  std::vector<TokenType> types;          // [pieces]
  bool add_dummy_prefix = true;          // NormalizerSpec.add_dummy_prefix
  bool remove_extra_whitespaces = true;  // NormalizerSpec.remove_extra_whitespaces
};

Result<SpModelInfo> parse_sp_model_info(std::string_view proto);

}  // namespace hearth
