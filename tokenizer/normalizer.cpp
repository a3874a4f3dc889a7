#include "tokenizer/normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>

#include "common/utf8.h"

namespace hearth {
namespace {

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

Result<std::string> unicode_form(std::string_view text, Normalizer::Form form) {
  if (is_ascii(text)) return std::string(text);  // every form leaves ASCII alone
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case Normalizer::Form::kNfc: normalizer = icu::Normalizer2::getNFCInstance(error); break;
    case Normalizer::Form::kNfkc: normalizer = icu::Normalizer2::getNFKCInstance(error); break;
    case Normalizer::Form::kNfd: normalizer = icu::Normalizer2::getNFDInstance(error); break;
    case Normalizer::Form::kNfkd: normalizer = icu::Normalizer2::getNFKDInstance(error); break;
  }
  if (U_FAILURE(error) || normalizer == nullptr) {
    return make_error(ErrorCode::kInternal, "ICU normalizer unavailable: {}", u_errorName(error));
  }
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  const icu::UnicodeString out = normalizer->normalize(in, error);
  if (U_FAILURE(error))
    return make_error(ErrorCode::kInvalidArgument, "Unicode normalization failed: {}", u_errorName(error));
  std::string result;
  out.toUTF8String(result);
  return result;
}

std::string lowercase(std::string_view text) {
  if (is_ascii(text)) {
    std::string out(text);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  s.toLower(icu::Locale::getRoot());
  std::string out;
  s.toUTF8String(out);
  return out;
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!u_isUWhiteSpace(static_cast<UChar32>(utf8_decode(text, next)))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(text[start]) & 0xc0) == 0x80) --start;
      size_t probe = start;
      if (!u_isUWhiteSpace(static_cast<UChar32>(utf8_decode(text, probe)))) break;
      end = start;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string collapse_spaces(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool prev_space = true;  // drops leading spaces
  for (const char c : text) {
    if (c == ' ') {
      if (prev_space) continue;
      prev_space = true;
    } else {
      prev_space = false;
    }
    out.push_back(c);
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

void Normalizer::add_unicode_form(Form form) { steps_.emplace_back(UnicodeForm{form}); }
void Normalizer::add_lowercase() { steps_.emplace_back(Lowercase{}); }
void Normalizer::add_prepend(std::string text) { steps_.emplace_back(Prepend{std::move(text)}); }
void Normalizer::add_replace(Regex pattern, std::string content) {
  steps_.emplace_back(Replace{std::move(pattern), std::move(content)});
}
void Normalizer::add_strip(bool left, bool right) { steps_.emplace_back(Strip{left, right}); }
void Normalizer::add_collapse_spaces() { steps_.emplace_back(CollapseSpaces{}); }

Result<std::string> Normalizer::apply(std::string_view text) const {
  std::string current(text);
  std::vector<std::pair<size_t, size_t>> matches;
  for (const Step& step : steps_) {
    if (const auto* form = std::get_if<UnicodeForm>(&step)) {
      HEARTH_ASSIGN_OR_RETURN(current, unicode_form(current, form->form));
    } else if (std::holds_alternative<Lowercase>(step)) {
      current = lowercase(current);
    } else if (const auto* prepend = std::get_if<Prepend>(&step)) {
      if (!current.empty()) current.insert(0, prepend->text);
    } else if (const auto* replace = std::get_if<Replace>(&step)) {
      matches.clear();
      HEARTH_RETURN_IF_ERROR(replace->pattern.find_all(current, matches));
      if (matches.empty()) continue;
      std::string out;
      out.reserve(current.size());
      size_t pos = 0;
      for (const auto& [begin, end] : matches) {
        out.append(current, pos, begin - pos);
        out.append(replace->content);
        pos = end;
      }
      out.append(current, pos, std::string::npos);
      current = std::move(out);
    } else if (const auto* s = std::get_if<Strip>(&step)) {
      current = strip(current, s->left, s->right);
    } else if (std::holds_alternative<CollapseSpaces>(step)) {
      current = collapse_spaces(current);
    }
  }
  return current;
}

}  // namespace hearth
