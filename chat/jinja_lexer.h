// Tokenizer for the chat-template Jinja subset (internal to chat/). Applies Hugging
// Face's environment while lexing, as Jinja2 does: newlines normalized to "\n", one
// trailing newline dropped, trim_blocks and lstrip_blocks, "-"/"+" whitespace control,
// comments removed and {% raw %} bodies passed through as text. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace hearth::jinja {

struct SourcePos {
  uint32_t line = 1;
  uint32_t column = 1;  // bytes from the line start, 1-based
};

enum class TokenKind : uint8_t {
  kText,        // template data between tags (text: the data, already whitespace-trimmed)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword (text)
  kString,      // string literal (text: the decoded value)
  kInt,         // integer literal (int_value)
  kFloat,       // float literal (float_value)
  kOp,          // operator or punctuation (text)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  SourcePos pos;
};

// "3:14: message": the form of every template error.
Status template_error(ErrorCode code, SourcePos pos, std::string_view message);

// Splits a template into tokens ending with kEof. Fails with kInvalidArgument and a
// line:column on unterminated tags, comments, strings and raw blocks, unbalanced
// brackets and characters that start no token.
Result<std::vector<Token>> jinja_tokenize(std::string_view source);

}  // namespace hearth::jinja
