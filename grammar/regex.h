// Regular expressions (the ECMAScript subset JSON Schema's `pattern` and vLLM's
// `guided_regex` use) as GBNF expressions.
//
// Supported: literals and escapes (\n \t \r \f \v \0 \xHH \uHHHH \u{H...} and escaped
// metacharacters), classes ([a-z], [^...], \d \D \w \W \s \S, also inside classes), `.`
// (anything but a newline), groups ((...), (?:...), (?<name>...)), alternation, the
// quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings), and ^ / $ at the
// very start / end. Refused, naming the construct: backreferences, lookaround, word
// boundaries, possessive quantifiers, POSIX classes, ^ / $ elsewhere.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace hearth::grammar {

enum class RegexTarget {
  kText,        // the pattern matches the output itself, whole
  kJsonString,  // the pattern matches a JSON string's value; the expression matches its
                // encoded form between the quotes (characters that JSON must escape come
                // escaped). Unanchored patterns match anywhere, as JSON Schema says.
};

// A GBNF expression (parenthesised) for the strings `pattern` matches.
Result<std::string> regex_to_gbnf(std::string_view pattern, RegexTarget target);

}  // namespace hearth::grammar
