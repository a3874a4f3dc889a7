// Regex: a PCRE2 pattern (UTF + Unicode properties, JIT when available) compiled once at
// load time and matched from any number of threads (each call brings its own match
// data). Internal to tokenizer/.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace hearth {

class Regex {
 public:
  // Compiles `pattern`; with `literal` it matches the text itself. Errors name the pattern.
  static Result<Regex> compile(std::string_view pattern, bool literal = false);

  // Appends the [begin, end) byte ranges of the non-empty, non-overlapping matches in
  // `text` (valid UTF-8), left to right. Fails when PCRE2's match limits are hit.
  Status find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

}  // namespace hearth
