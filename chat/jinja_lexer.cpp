#include "chat/jinja_lexer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "chat/jinja_value.h"
#include "common/utf8.h"

namespace hearth::jinja {
namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Jinja2 reads sources with every newline form turned into "\n" and, unless told to
// keep it, without one trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Python's str.rstrip() with no argument.
std::string_view rstrip_py(std::string_view text) {
  size_t pos = 0, keep = 0;
  while (pos < text.size()) {
    const char32_t cp = utf8_next(text, pos);
    if (!is_py_space(cp)) keep = pos;
  }
  return text.substr(0, keep);
}

bool all_py_space(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (!is_py_space(utf8_next(text, pos))) return false;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize_newlines(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  Result<std::vector<Token>> run() {
    size_t p = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (p < n) {
      const size_t open = find_opener(p);
      if (open == std::string::npos) {
        emit_text(std::string_view(src_).substr(p), p);
        break;
      }
      std::string_view text(src_.data() + p, open - p);
      const char kind = src_[open + 1];
      size_t q = open + 2;
      char sign = 0;
      if (q < n && (src_[q] == '-' || src_[q] == '+')) sign = src_[q++];
      size_t raw_body = std::string::npos;
      if (kind == '%') raw_body = match_raw_begin(q);
      text = strip_before_tag(text, sign, kind != '{', line_starting);
      emit_text(text, p);
      if (raw_body != std::string::npos) {
        HEARTH_ASSIGN_OR_RETURN(p, lex_raw(open, raw_body));
      } else if (kind == '#') {
        HEARTH_ASSIGN_OR_RETURN(p, skip_comment(open, q));
      } else {
        HEARTH_ASSIGN_OR_RETURN(p, lex_tag(open, q, kind == '%'));
      }
      line_starting = p > 0 && src_[p - 1] == '\n';
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    eof.pos = pos_at(n);
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  SourcePos pos_at(size_t offset) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    SourcePos pos;
    pos.line = static_cast<uint32_t>(line);
    pos.column = static_cast<uint32_t>(offset - line_starts_[line - 1] + 1);
    return pos;
  }

  Status error_at(size_t offset, std::string_view message) const {
    return template_error(ErrorCode::kInvalidArgument, pos_at(offset), message);
  }

  bool at(size_t p, std::string_view s) const { return src_.compare(p, s.size(), s) == 0; }

  void skip_space(size_t& p) const {
    while (p < src_.size()) {
      size_t next = p;
      if (!is_py_space(utf8_next(src_, next))) break;
      p = next;
    }
  }

  size_t find_opener(size_t from) const {
    size_t i = from;
    while ((i = src_.find('{', i)) != std::string::npos) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
      ++i;
    }
    return std::string::npos;
  }

  // After "{%" and its sign: when the tag is `raw` ("\s*raw\s*(-%}\s*|%})"), the offset
  // where the raw body starts; npos otherwise. No trim_blocks newline after it.
  size_t match_raw_begin(size_t q) const {
    size_t r = q;
    skip_space(r);
    if (!at(r, "raw")) return std::string::npos;
    r += 3;
    skip_space(r);
    if (at(r, "-%}")) {
      r += 3;
      skip_space(r);
      return r;
    }
    if (at(r, "%}")) return r + 2;
    return std::string::npos;
  }

  // Jinja2's whitespace rules for the data before a tag: "-" strips all whitespace,
  // "+" keeps it, and lstrip_blocks removes the indentation before block and comment
  // tags that start a line.
  static std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip, bool line_starting) {
    if (sign == '-') return rstrip_py(text);
    if (sign == '+' || !lstrip) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if ((l_pos > 0 || line_starting) && l_pos < text.size() && all_py_space(text.substr(l_pos))) {
      return text.substr(0, l_pos);
    }
    return text;
  }

  void emit_text(std::string_view text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::string(text);
    t.pos = pos_at(offset);
    tokens_.push_back(std::move(t));
  }

  void emit(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = pos_at(offset);
    tokens_.push_back(std::move(t));
  }

  // The end of a `+X}`, `-X}` (then whitespace) or `X}\n?` closer at p, or npos.
  size_t match_closer(size_t p, char mark, bool trim_newline) const {
    const std::string plain{mark, '}'};
    if (p < src_.size() && src_[p] == '+' && at(p + 1, plain)) return p + 3;
    if (p < src_.size() && src_[p] == '-' && at(p + 1, plain)) {
      size_t e = p + 3;
      skip_space(e);
      return e;
    }
    if (at(p, plain)) {
      size_t e = p + 2;
      if (trim_newline && e < src_.size() && src_[e] == '\n') ++e;
      return e;
    }
    return std::string::npos;
  }

  Result<size_t> lex_raw(size_t open, size_t body) {
    bool line_starting = body > 0 && src_[body - 1] == '\n';
    size_t k = body;
    while ((k = src_.find("{%", k)) != std::string::npos) {
      size_t r = k + 2;
      char sign = 0;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) sign = src_[r++];
      skip_space(r);
      if (at(r, "endraw")) {
        r += 6;
        skip_space(r);
        const size_t end = match_closer(r, '%', /*trim_newline=*/true);
        if (end != std::string::npos) {
          std::string_view text(src_.data() + body, k - body);
          emit_text(strip_before_tag(text, sign, true, line_starting), body);
          return end;
        }
      }
      k += 2;
    }
    return error_at(open, "missing end of raw directive");
  }

  Result<size_t> skip_comment(size_t open, size_t q) const {
    for (size_t k = q; k + 1 < src_.size(); ++k) {
      const size_t end = match_closer(k, '#', /*trim_newline=*/true);
      if (end != std::string::npos) return end;
    }
    return error_at(open, "missing end of comment tag");
  }

  Result<size_t> lex_tag(size_t open, size_t p, bool is_block) {
    emit(is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, is_block ? "{%" : "{{", open);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      skip_space(p);
      if (p >= n) {
        return error_at(
            open, is_block ? "unexpected end of template, missing '%}'" : "unexpected end of template, missing '}}'");
      }
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (is_block) {
          end = match_closer(p, '%', /*trim_newline=*/true);
        } else if (at(p, "-}}")) {
          end = p + 3;
          skip_space(end);
        } else if (at(p, "}}")) {
          end = p + 2;
        }
        if (end != std::string::npos) {
          emit(is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, is_block ? "%}" : "}}", p);
          return end;
        }
      }
      HEARTH_RETURN_IF_ERROR(lex_token(p, balance));
    }
  }

  Status lex_token(size_t& p, std::vector<char>& balance) {
    const size_t start = p;
    const char c = src_[p];
    if (is_name_start(c)) {
      while (p < src_.size() && is_name_char(src_[p])) ++p;
      emit(TokenKind::kName, src_.substr(start, p - start), start);
      return Status::ok();
    }
    if (is_digit(c)) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static constexpr std::string_view kTwoCharOps[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwoCharOps) {
      if (at(p, op)) {
        emit(TokenKind::kOp, std::string(op), start);
        p += 2;
        return Status::ok();
      }
    }
    static constexpr std::string_view kOneCharOps = "+-/*%~[](){}><=.:|,;";
    if (kOneCharOps.find(c) == std::string_view::npos) {
      return error_at(p, fmt::format("unexpected character '{}'", c));
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return error_at(p, fmt::format("unexpected '{}'", c));
      if (balance.back() != c) return error_at(p, fmt::format("unexpected '{}', expected '{}'", c, balance.back()));
      balance.pop_back();
    }
    emit(TokenKind::kOp, std::string(1, c), start);
    ++p;
    return Status::ok();
  }

  // Digits with single underscores between them ("1_000").
  std::string scan_digits(size_t& p, int (*digit)(char)) const {
    std::string digits;
    while (p < src_.size()) {
      if (digit(src_[p]) >= 0) {
        digits += src_[p++];
      } else if (src_[p] == '_' && !digits.empty() && p + 1 < src_.size() && digit(src_[p + 1]) >= 0) {
        ++p;
      } else {
        break;
      }
    }
    return digits;
  }

  Status lex_number(size_t& p) {
    const size_t start = p;
    static constexpr auto dec = [](char ch) { return is_digit(ch) ? ch - '0' : -1; };
    if (src_[p] == '0' && p + 1 < src_.size() &&
        std::string_view("xXoObB").find(src_[p + 1]) != std::string_view::npos) {
      const char base_char = static_cast<char>(src_[p + 1] | 0x20);
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      p += 2;
      if (p < src_.size() && src_[p] == '_') ++p;
      std::string digits;
      if (base == 16) {
        digits = scan_digits(p, hex_value);
      } else if (base == 8) {
        digits = scan_digits(p, [](char ch) { return ch >= '0' && ch <= '7' ? ch - '0' : -1; });
      } else {
        digits = scan_digits(p, [](char ch) { return ch == '0' || ch == '1' ? ch - '0' : -1; });
      }
      if (digits.empty()) return error_at(start, "invalid integer literal");
      return emit_int(digits, base, start);
    }
    std::string digits = scan_digits(p, dec);
    // A float needs digits after the dot; "x.0.1" (after a dot) is two subscripts.
    const bool after_dot = start > 0 && src_[start - 1] == '.';
    bool is_float = false;
    std::string text = digits;
    if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
      ++p;
      text += '.' + scan_digits(p, dec);
      is_float = true;
    }
    if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t e = p + 1;
      std::string exp = "e";
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) exp += src_[e++];
      if (e < src_.size() && is_digit(src_[e])) {
        exp += scan_digits(e, dec);
        text += exp;
        p = e;
        is_float = true;
      }
    }
    if (is_float) {
      Token t;
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
      t.text = std::move(text);
      t.pos = pos_at(start);
      tokens_.push_back(std::move(t));
      return Status::ok();
    }
    return emit_int(digits, 10, start);
  }

  Status emit_int(const std::string& digits, int base, size_t start) {
    int64_t value = 0;
    for (char ch : digits) {
      const int d = hex_value(ch);
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) {
        return error_at(start, "integer literal too large");
      }
    }
    Token t;
    t.kind = TokenKind::kInt;
    t.int_value = value;
    t.text = digits;
    t.pos = pos_at(start);
    tokens_.push_back(std::move(t));
    return Status::ok();
  }

  // A quoted literal, decoded like Python's "unicode-escape" codec (what Jinja2 uses).
  Status lex_string(size_t& p) {
    const size_t start = p;
    const char quote = src_[p++];
    std::string value;
    while (true) {
      if (p >= src_.size()) return error_at(start, "unterminated string literal");
      const char c = src_[p];
      if (c == quote) {
        ++p;
        break;
      }
      if (c != '\\') {
        value += c;
        ++p;
        continue;
      }
      if (p + 1 >= src_.size()) return error_at(start, "unterminated string literal");
      const char e = src_[p + 1];
      p += 2;
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          value += '\\';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case 'a':
          value += '\a';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'v':
          value += '\v';
          break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t len = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t cp = 0;
          for (size_t i = 0; i < len; ++i) {
            const int d = p + i < src_.size() ? hex_value(src_[p + i]) : -1;
            if (d < 0) return error_at(p - 2, fmt::format("truncated \\{} escape in string literal", e));
            cp = cp * 16 + static_cast<char32_t>(d);
          }
          p += len;
          if (cp > 0x10ffff) return error_at(p - len - 2, "escape past U+10FFFF in string literal");
          // A UTF-16 surrogate pair written as two \u escapes is one character.
          if (cp >= 0xd800 && cp < 0xdc00 && at(p, "\\u")) {
            char32_t low = 0;
            bool ok = true;
            for (size_t i = 0; i < 4; ++i) {
              const int d = p + 2 + i < src_.size() ? hex_value(src_[p + 2 + i]) : -1;
              if (d < 0) ok = false;
              low = low * 16 + static_cast<char32_t>(std::max(d, 0));
            }
            if (ok && low >= 0xdc00 && low < 0xe000) {
              cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
              p += 6;
            }
          }
          utf8_append(value, cp);
          break;
        }
        case 'N':
          return error_at(p - 2, "\\N{...} escapes are not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i) {
              cp = cp * 8 + static_cast<char32_t>(src_[p++] - '0');
            }
            utf8_append(value, cp);
          } else {
            value += '\\';
            value += e;
          }
          break;
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(value);
    t.pos = pos_at(start);
    tokens_.push_back(std::move(t));
    return Status::ok();
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

Status template_error(ErrorCode code, SourcePos pos, std::string_view message) {
  return Status(code, fmt::format("{}:{}: {}", pos.line, pos.column, message));
}

Result<std::vector<Token>> jinja_tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace hearth::jinja
