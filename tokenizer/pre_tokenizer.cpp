#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <span>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

struct Range {
  size_t begin, end;
  bool is_match;
};

// Hugging Face's NormalizedString::split: the pieces of `text` kept by `behavior`, given
// the pattern's matches. Empty pieces are dropped.
Status split_ranges(std::string_view text, const Regex& pattern, SplitBehavior behavior, bool invert,
                    std::vector<std::pair<size_t, size_t>>& kept) {
  std::vector<std::pair<size_t, size_t>> matches;
  HEARTH_RETURN_IF_ERROR(pattern.find_all(text, matches));
  std::vector<Range> ranges;
  ranges.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > prev) ranges.push_back({prev, begin, invert});
    ranges.push_back({begin, end, !invert});
    prev = end;
  }
  if (prev < text.size()) ranges.push_back({prev, text.size(), invert});

  std::vector<Range> out;  // is_match here means "remove"
  out.reserve(ranges.size());
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Range& r : ranges) out.push_back({r.begin, r.end, false});
      break;
    case SplitBehavior::kRemoved: out = ranges; break;
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Range& r : ranges) {
        if (r.is_match == previous_match && !out.empty()) {
          out.back().end = r.end;
        } else {
          out.push_back({r.begin, r.end, false});
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Range& r : ranges) {
        if (r.is_match && !previous_match && !out.empty()) {
          out.back().end = r.end;
        } else {
          out.push_back({r.begin, r.end, false});
        }
        previous_match = r.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (auto it = ranges.rbegin(); it != ranges.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (const Range& r : out) {
    if (!r.is_match && r.end > r.begin) kept.emplace_back(r.begin, r.end);
  }
  return Status::ok();
}

struct Piece {
  std::string text;
  bool at_start;  // begins the input text
};

}  // namespace

void PreTokenizer::add_split(Regex pattern, SplitBehavior behavior, bool invert) {
  steps_.emplace_back(Split{std::move(pattern), behavior, invert});
}

Status PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Regex gpt2;
  if (use_regex) {
    HEARTH_ASSIGN_OR_RETURN(gpt2, Regex::compile(kGpt2Pattern));
  }
  steps_.emplace_back(ByteLevel{add_prefix_space, use_regex, std::move(gpt2)});
  return Status::ok();
}

void PreTokenizer::add_metaspace(std::string replacement, PrependScheme scheme, bool split) {
  auto splitter = Regex::compile(replacement, /*literal=*/true);
  // A literal of valid UTF-8 always compiles; an empty replacement splits nothing.
  steps_.emplace_back(Metaspace{std::move(replacement), scheme, split && splitter.is_ok(),
                                splitter.is_ok() ? std::move(splitter).value() : Regex()});
}

Status PreTokenizer::apply(std::string_view text, bool at_input_start, std::vector<std::string>& out) const {
  std::vector<Piece> pieces;
  pieces.push_back({std::string(text), at_input_start});
  std::vector<Piece> next;
  std::vector<std::pair<size_t, size_t>> kept;
  for (const Step& step : steps_) {
    next.clear();
    for (Piece& piece : pieces) {
      if (const auto* split = std::get_if<Split>(&step)) {
        kept.clear();
        HEARTH_RETURN_IF_ERROR(split_ranges(piece.text, split->pattern, split->behavior, split->invert, kept));
        for (const auto& [begin, end] : kept) {
          next.push_back({piece.text.substr(begin, end - begin), piece.at_start && begin == 0});
        }
      } else if (const auto* byte_level = std::get_if<ByteLevel>(&step)) {
        if (byte_level->add_prefix_space && (piece.text.empty() || piece.text.front() != ' ')) {
          piece.text.insert(0, 1, ' ');
        }
        if (byte_level->use_regex) {
          kept.clear();
          HEARTH_RETURN_IF_ERROR(split_ranges(piece.text, byte_level->gpt2, SplitBehavior::kIsolated, false, kept));
          for (const auto& [begin, end] : kept) {
            next.push_back({byte_level_encode(std::string_view(piece.text).substr(begin, end - begin)),
                            piece.at_start && begin == 0});
          }
        } else if (!piece.text.empty()) {
          next.push_back({byte_level_encode(piece.text), piece.at_start});
        }
      } else if (const auto* meta = std::get_if<Metaspace>(&step)) {
        std::string replaced = replace_all(piece.text, " ", meta->replacement);
        const bool starts = replaced.compare(0, meta->replacement.size(), meta->replacement) == 0;
        if (!starts &&
            (meta->scheme == PrependScheme::kAlways || (meta->scheme == PrependScheme::kFirst && piece.at_start))) {
          replaced.insert(0, meta->replacement);
        }
        if (meta->split) {
          kept.clear();
          HEARTH_RETURN_IF_ERROR(split_ranges(replaced, meta->splitter, SplitBehavior::kMergedWithNext, false, kept));
          for (const auto& [begin, end] : kept) {
            next.push_back({replaced.substr(begin, end - begin), piece.at_start && begin == 0});
          }
        } else if (!replaced.empty()) {
          next.push_back({std::move(replaced), piece.at_start});
        }
      }
    }
    std::swap(pieces, next);
  }
  out.clear();
  out.reserve(pieces.size());
  for (Piece& piece : pieces) {
    if (!piece.text.empty()) out.push_back(std::move(piece.text));
  }
  return Status::ok();
}

Status pre_tokenizer_for_gguf(std::string_view pre, PreTokenizer& out) {
  // llama.cpp's regex lists per pre-tokenizer name; each splits the pieces of the one
  // before it, keeping matches and the text between them.
  static constexpr std::string_view kDefault[] = {
      R"([\p{P}\$\+<=>\^~\|]+)",
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
      R"(\p{N}+)",
      R"([0-9][0-9][0-9])",
  };
  static constexpr std::string_view kGpt2[] = {kGpt2Pattern};
  static constexpr std::string_view kLlama3[] = {
      R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
  };
  static constexpr std::string_view kQwen2[] = {
      R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
  };
  static constexpr std::string_view kSmollm[] = {
      R"(\p{N})",
      R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
  };
  std::span<const std::string_view> patterns;
  if (pre.empty() || pre == "default") {
    patterns = kDefault;
  } else if (pre == "gpt-2" || pre == "gpt2") {
    patterns = kGpt2;
  } else if (pre == "llama3" || pre == "llama-v3" || pre == "llama-bpe") {
    patterns = kLlama3;
  } else if (pre == "qwen2") {
    patterns = kQwen2;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact") {
    patterns = kSmollm;
  } else {
    return make_error(ErrorCode::kUnsupported,
                      "GGUF pre-tokenizer \"{}\" is not supported (supported: default, "
                      "gpt-2, llama3, llama-bpe, qwen2, smollm, starcoder, refact)",
                      pre);
  }
  for (const std::string_view p : patterns) {
    HEARTH_ASSIGN_OR_RETURN(Regex regex, Regex::compile(p));
    out.add_split(std::move(regex), SplitBehavior::kIsolated, false);
  }
  return out.add_byte_level(false, false);
}

}  // namespace hearth
