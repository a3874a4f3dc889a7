// Parser of the chat-template Jinja subset (internal to chat/): tokens -> Template.
// Pure function; thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"
#include "common/status.h"

namespace hearth::jinja {

// Deepest nesting of brackets, blocks and operators the parser accepts.
inline constexpr int kMaxParseNesting = 100;
// Deepest expression tree (a chain `a + b + c ...` is as deep as it is long).
inline constexpr int kMaxExprDepth = 200;

// Parses a template. Syntax errors are kInvalidArgument, constructs outside the subset
// (include, extends, block, import, recursive loops, unknown filters and tests) are
// kUnsupported; both name the line and column.
Result<std::shared_ptr<const Template>> jinja_parse(std::string_view source);

}  // namespace hearth::jinja
