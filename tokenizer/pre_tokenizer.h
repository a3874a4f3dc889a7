// PreTokenizer: splits normalized text into the pieces ("words") the model encodes one by
// one: regex splits with Hugging Face's delimiter behaviours, GPT-2's ByteLevel step and
// SentencePiece-style Metaspace. Built at load time, then immutable and thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/status.h"
#include "tokenizer/regex.h"

namespace hearth {

// What a split does with the text its pattern matches (Hugging Face's names).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// When Metaspace puts the replacement character in front of a piece.
enum class PrependScheme { kAlways, kFirst, kNever };

// GPT-2's pre-tokenizer regex.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  // Steps run in the order they were added, each on every piece the previous one made.
  void add_split(Regex pattern, SplitBehavior behavior, bool invert);
  // GPT-2's byte-level step: optional space prefix, optional GPT-2 regex split, then
  // every byte shown as its byte-level character.
  Status add_byte_level(bool add_prefix_space, bool use_regex);
  void add_metaspace(std::string replacement, PrependScheme scheme, bool split);

  bool empty() const { return steps_.empty(); }

  // Splits one segment of valid UTF-8 text (no added tokens in it) into `out`, replacing
  // its contents. `at_input_start`: the segment begins the input text.
  Status apply(std::string_view text, bool at_input_start, std::vector<std::string>& out) const;

 private:
  struct Split {
    Regex pattern;
    SplitBehavior behavior;
    bool invert;
  };
  struct ByteLevel {
    bool add_prefix_space;
    bool use_regex;
    Regex gpt2;
  };
  struct Metaspace {
    std::string replacement;
    PrependScheme scheme;
    bool split;
    Regex splitter;
  };
  using Step = std::variant<Split, ByteLevel, Metaspace>;

  std::vector<Step> steps_;
};

// The splits llama.cpp uses for a GGUF "gpt2" vocabulary's tokenizer.ggml.pre name,
// followed by the byte-level step. Unknown names are refused (kUnsupported).
Status pre_tokenizer_for_gguf(std::string_view pre, PreTokenizer& out);

}  // namespace hearth
