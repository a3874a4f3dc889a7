// TokenizerConfig: what hearth reads from a Hugging Face tokenizer_config.json (BOS/EOS
// tokens and whether to add them, the chat template). Pure parsing; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace hearth {

// A special-token field: absent, explicitly null (no such token), or named.
struct ConfigToken {
  bool present = false;
  std::optional<std::string> content;  // nullopt with present: "null"
};

struct TokenizerConfig {
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  ConfigToken bos_token;
  ConfigToken eos_token;
  std::string chat_template;  // "" when none
};

// Parses tokenizer_config.json text; empty text gives the empty config.
Result<TokenizerConfig> parse_tokenizer_config(std::string_view json);

}  // namespace hearth
