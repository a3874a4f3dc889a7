#include "tokenizer/decoder.h"

#include "common/utf8.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/vocab.h"

namespace hearth {
namespace {

bool single_char(std::string_view s) {
  if (s.empty() || !utf8_is_valid(s)) return false;
  size_t pos = 0;
  utf8_decode(s, pos);
  return pos == s.size();
}

}  // namespace

void Decoder::add_byte_level() { steps_.emplace_back(ByteLevel{}); }

Status Decoder::add_replace(std::string pattern, std::string content) {
  if (pattern.empty()) return make_error(ErrorCode::kFormat, "decoder Replace has an empty pattern");
  // After Fuse the pattern sees the joined text; a one-character pattern gives the same
  // result token by token, a longer one might span two tokens.
  if (fused_ && !single_char(pattern)) {
    return make_error(ErrorCode::kUnsupported, "decoder Replace of \"{}\" after Fuse is not supported", pattern);
  }
  steps_.emplace_back(Replace{std::move(pattern), std::move(content)});
  return Status::ok();
}

void Decoder::add_byte_fallback() { steps_.emplace_back(ByteFallback{}); }

void Decoder::add_fuse() { fused_ = true; }

Status Decoder::add_strip(std::string content, int64_t start, int64_t stop) {
  if (start < 0 || stop < 0 || start > 1024 || stop > 1024) {
    return make_error(ErrorCode::kFormat, "decoder Strip has counts {} and {}", start, stop);
  }
  if (!single_char(content)) {
    return make_error(ErrorCode::kFormat, "decoder Strip content \"{}\" is not one character", content);
  }
  if (!fused_) {
    steps_.emplace_back(Strip{std::move(content), start, stop});
    return Status::ok();
  }
  // On the joined text: only "drop one leading space" can be done token by token.
  if (stop != 0 || start > 1 || (start == 1 && content != " ")) {
    return make_error(ErrorCode::kUnsupported,
                      "decoder Strip of \"{}\" (start {}, stop {}) after Fuse is not supported", content, start, stop);
  }
  if (start == 1) strips_leading_space_ = true;
  return Status::ok();
}

void Decoder::add_metaspace(std::string replacement, bool strip_first) {
  steps_.emplace_back(Metaspace{std::move(replacement)});
  if (strip_first) strips_leading_space_ = true;
}

std::string Decoder::token_bytes(std::string_view piece) const {
  std::string current(piece);
  for (const Step& step : steps_) {
    if (std::holds_alternative<ByteLevel>(step)) {
      std::string decoded;
      if (byte_level_decode(current, decoded)) current = std::move(decoded);
    } else if (const auto* replace = std::get_if<Replace>(&step)) {
      current = replace_all(current, replace->pattern, replace->content);
    } else if (std::holds_alternative<ByteFallback>(step)) {
      if (const auto b = parse_byte_piece(current)) current.assign(1, static_cast<char>(*b));
    } else if (const auto* strip = std::get_if<Strip>(&step)) {
      for (int64_t i = 0; i < strip->start && current.compare(0, strip->content.size(), strip->content) == 0; ++i) {
        current.erase(0, strip->content.size());
      }
      for (int64_t i = 0;
           i < strip->stop && current.size() >= strip->content.size() &&
           current.compare(current.size() - strip->content.size(), strip->content.size(), strip->content) == 0;
           ++i) {
        current.resize(current.size() - strip->content.size());
      }
    } else if (const auto* meta = std::get_if<Metaspace>(&step)) {
      current = replace_all(current, meta->replacement, " ");
    }
  }
  return current;
}

}  // namespace hearth
