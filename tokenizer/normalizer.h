// Normalizer: the text rewrites a tokenizer applies before splitting (Unicode
// normalization forms, Prepend, Replace, Lowercase, Strip, SentencePiece's whitespace
// cleanup). Built at load time, then immutable and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace hearth {

class Normalizer {
 public:
  enum class Form { kNfc, kNfkc, kNfd, kNfkd };

  // Steps run in the order they were added.
  void add_unicode_form(Form form);
  void add_lowercase();
  // Prepends `text` to a non-empty input.
  void add_prepend(std::string text);
  // Replaces every match of `pattern` (a Regex, literal or not) with `content`.
  void add_replace(Regex pattern, std::string content);
  // Removes leading / trailing Unicode whitespace.
  void add_strip(bool left, bool right);
  // SentencePiece's remove_extra_whitespaces: drops leading and trailing spaces and
  // turns each run of spaces into one.
  void add_collapse_spaces();

  bool empty() const { return steps_.empty(); }

  // Runs every step on valid UTF-8 `text`; the result is valid UTF-8.
  Result<std::string> apply(std::string_view text) const;

 private:
  struct UnicodeForm {
    Form form;
  };
  struct Lowercase {};
  struct Prepend {
    std::string text;
  };
  struct Replace {
    Regex pattern;
    std::string content;
  };
  struct Strip {
    bool left, right;
  };
  struct CollapseSpaces {};
  using Step = std::variant<UnicodeForm, Lowercase, Prepend, Replace, Strip, CollapseSpaces>;

  std::vector<Step> steps_;
};

}  // namespace hearth
