#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace hearth {
namespace {

// Bounds on one match attempt, so a pathological pattern from a hostile file costs a
// bounded amount of time and memory instead of hanging the process.
constexpr uint32_t kMatchLimit = 5'000'000;
constexpr uint32_t kHeapLimitKiB = 64 * 1024;
constexpr size_t kMaxPatternBytes = 64 * 1024;

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  if (n < 0) return "PCRE2 error " + std::to_string(code);
  return std::string(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* p) const noexcept { pcre2_match_data_free(p); }
};
struct MatchContextDeleter {
  void operator()(pcre2_match_context* p) const noexcept { pcre2_match_context_free(p); }
};

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

Result<Regex> Regex::compile(std::string_view pattern, bool literal) {
  if (pattern.size() > kMaxPatternBytes) {
    return make_error(ErrorCode::kUnsupported, "regex of {} bytes is longer than the {} accepted", pattern.size(),
                      kMaxPatternBytes);
  }
  // PCRE2 refuses UCP beside LITERAL; a literal needs no character classes anyway.
  const uint32_t options = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (code == nullptr) {
    return make_error(ErrorCode::kFormat, "regex \"{}\" does not compile at offset {}: {}", pattern, offset,
                      pcre2_message(error));
  }
  auto owned = std::make_shared<Code>();
  owned->code = code;
  uint32_t have_jit = 0;
  pcre2_config(PCRE2_CONFIG_JIT, &have_jit);
  if (have_jit != 0) owned->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(owned);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Status Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  if (!code_ || text.empty()) return Status::ok();
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create_from_pattern(code_->code, nullptr));
  std::unique_ptr<pcre2_match_context, MatchContextDeleter> context(pcre2_match_context_create(nullptr));
  if (!data || !context) return make_error(ErrorCode::kResourceExhausted, "out of memory for a regex match");
  pcre2_set_match_limit(context.get(), kMatchLimit);
  pcre2_set_heap_limit(context.get(), kHeapLimitKiB);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    // The caller's text is valid UTF-8; skipping PCRE2's own check keeps each call
    // O(match) instead of O(rest of the text).
    int rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data.get(), context.get());
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data.get(),
                       context.get());
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return make_error(ErrorCode::kInvalidArgument, "regex \"{}\" failed on the input: {}", pattern_,
                        pcre2_message(rc));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches.emplace_back(begin, end);
      pos = end;
    } else {
      // An empty match: move on by one character.
      pos = begin + 1;
      while (pos < text.size() && (static_cast<unsigned char>(text[pos]) & 0xc0) == 0x80) ++pos;
    }
  }
  return Status::ok();
}

}  // namespace hearth
