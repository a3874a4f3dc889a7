#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "grammar/utf8_ranges.h"

namespace hearth::grammar {
namespace {

struct Node {
  enum class Kind : uint8_t { kAlt, kSeq, kSet, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<Node> children;
  std::vector<CodeRange> set;  // kSet, normalised
  int64_t min = 0, max = 0;    // kRepeat; max < 0: unbounded
};

constexpr int64_t kMaxCount = 100000;

std::vector<CodeRange> digit_set() { return {{'0', '9'}}; }
std::vector<CodeRange> word_set() { return normalize_ranges({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}); }
std::vector<CodeRange> space_set() {
  return normalize_ranges({{'\t', '\r'},
                           {' ', ' '},
                           {0xA0, 0xA0},
                           {0x1680, 0x1680},
                           {0x2000, 0x200A},
                           {0x2028, 0x2029},
                           {0x202F, 0x202F},
                           {0x205F, 0x205F},
                           {0x3000, 0x3000},
                           {0xFEFF, 0xFEFF}});
}

class RegexParser {
 public:
  explicit RegexParser(std::string_view s) : s_(s) {}

  Result<Node> parse() {
    HEARTH_ASSIGN_OR_RETURN(Node n, alternation(0));
    if (i_ < s_.size()) return error("unbalanced )");
    return n;
  }

 private:
  Status error(std::string_view what) const {
    return make_error(ErrorCode::kInvalidArgument, "pattern {}: {} at offset {}", quote(), what, i_);
  }
  Status unsupported(std::string_view what) const {
    return make_error(ErrorCode::kUnsupported, "pattern {}: {} (offset {}) is not supported in constrained decoding",
                      quote(), what, i_);
  }
  std::string quote() const {
    if (s_.size() <= 40) return fmt::format("\"{}\"", s_);
    return fmt::format("\"{}...\"", s_.substr(0, 40));
  }
  bool at(char c) const { return i_ < s_.size() && s_[i_] == c; }

  Result<Node> alternation(int depth) {
    if (depth > 100) return error("groups nest too deep");
    Node alt;
    alt.kind = Node::Kind::kAlt;
    HEARTH_ASSIGN_OR_RETURN(Node first, sequence(depth));
    alt.children.push_back(std::move(first));
    while (at('|')) {
      ++i_;
      HEARTH_ASSIGN_OR_RETURN(Node next, sequence(depth));
      alt.children.push_back(std::move(next));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Result<Node> sequence(int depth) {
    Node seq;
    seq.kind = Node::Kind::kSeq;
    while (i_ < s_.size() && !at('|') && !at(')')) {
      Node atom;
      const char c = s_[i_];
      if (c == '(') {
        ++i_;
        if (at('?')) {
          ++i_;
          if (at(':')) {
            ++i_;
          } else if (at('<') && i_ + 1 < s_.size() && s_[i_ + 1] != '=' && s_[i_ + 1] != '!') {
            while (i_ < s_.size() && s_[i_] != '>') ++i_;  // a named group: the name is not needed
            if (!at('>')) return error("unterminated group name");
            ++i_;
          } else {
            return unsupported("lookaround or an inline flag");
          }
        }
        HEARTH_ASSIGN_OR_RETURN(atom, alternation(depth + 1));
        if (!at(')')) return error("missing )");
        ++i_;
      } else if (c == '[') {
        HEARTH_ASSIGN_OR_RETURN(atom, char_class());
      } else if (c == '.') {
        ++i_;
        atom = set_node(complement_ranges(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}})));
      } else if (c == '^' || c == '$') {
        return unsupported("an anchor inside the pattern (only ^ at its start and $ at its end are)");
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (c == '{' && !quantifier_follows()) {
          ++i_;
          atom = set_node({{'{', '{'}});
        } else {
          return error("a quantifier with nothing to repeat");
        }
      } else if (c == '\\') {
        HEARTH_ASSIGN_OR_RETURN(atom, escape_atom());
      } else {
        HEARTH_ASSIGN_OR_RETURN(const uint32_t cp, literal_char());
        atom = set_node({{cp, cp}});
      }
      HEARTH_RETURN_IF_ERROR(quantifiers(atom));
      seq.children.push_back(std::move(atom));
    }
    if (seq.children.size() == 1) return std::move(seq.children[0]);
    return seq;
  }

  static Node set_node(std::vector<CodeRange> set) {
    Node n;
    n.kind = Node::Kind::kSet;
    n.set = normalize_ranges(std::move(set));
    return n;
  }

  bool quantifier_follows() const {
    // {n}, {n,} or {n,m}; anything else after { is a literal brace (as in JavaScript's
    // non-unicode mode).
    size_t p = i_ + 1;
    const size_t b = p;
    while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') ++p;
    if (p == b) return false;
    if (p < s_.size() && s_[p] == ',') {
      ++p;
      while (p < s_.size() && s_[p] >= '0' && s_[p] <= '9') ++p;
    }
    return p < s_.size() && s_[p] == '}';
  }

  Result<int64_t> count() {
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_] - '0');
      if (v > kMaxCount) return unsupported(fmt::format("a repetition count above {}", kMaxCount));
      ++i_;
    }
    return v;
  }

  Status quantifiers(Node& atom) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      int64_t lo = 0, hi = 0;
      if (c == '*') {
        lo = 0, hi = -1;
        ++i_;
      } else if (c == '+') {
        lo = 1, hi = -1;
        ++i_;
      } else if (c == '?') {
        lo = 0, hi = 1;
        ++i_;
      } else if (c == '{' && quantifier_follows()) {
        ++i_;
        HEARTH_ASSIGN_OR_RETURN(lo, count());
        hi = lo;
        if (at(',')) {
          ++i_;
          if (at('}')) {
            hi = -1;
          } else {
            HEARTH_ASSIGN_OR_RETURN(hi, count());
          }
        }
        ++i_;  // }
        if (hi >= 0 && hi < lo) return error("a repetition whose maximum is below its minimum");
      } else {
        return Status::ok();
      }
      if (at('?')) ++i_;  // lazy: the same strings
      if (at('+')) return unsupported("a possessive quantifier");
      Node rep;
      rep.kind = Node::Kind::kRepeat;
      rep.min = lo;
      rep.max = hi;
      rep.children.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return Status::ok();
  }

  Result<uint32_t> literal_char() {
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c < 0x80) {
      ++i_;
      return uint32_t{c};
    }
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (len == 0 || i_ + len > s_.size()) return error("invalid UTF-8");
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s_[i_ + k]);
      if ((cc & 0xC0) != 0x80) return error("invalid UTF-8");
      cp = (cp << 6) | (cc & 0x3F);
    }
    i_ += len;
    return cp;
  }

  Result<uint32_t> hex_digits(size_t n) {
    uint32_t v = 0;
    for (size_t k = 0; k < n; ++k) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return error("expected a hex digit");
      const char h = s_[i_++];
      v = v * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
    }
    return v;
  }

  // After a backslash: one character, or a class escape (\d ...) into `set`.
  Result<std::vector<CodeRange>> escape(bool in_class) {
    ++i_;  // the backslash
    if (i_ >= s_.size()) return error("a pattern cannot end with a backslash");
    const char e = s_[i_++];
    switch (e) {
      case 'd':
        return digit_set();
      case 'D':
        return complement_ranges(digit_set());
      case 'w':
        return word_set();
      case 'W':
        return complement_ranges(word_set());
      case 's':
        return space_set();
      case 'S':
        return complement_ranges(space_set());
      case 'n':
        return std::vector<CodeRange>{{'\n', '\n'}};
      case 't':
        return std::vector<CodeRange>{{'\t', '\t'}};
      case 'r':
        return std::vector<CodeRange>{{'\r', '\r'}};
      case 'f':
        return std::vector<CodeRange>{{'\f', '\f'}};
      case 'v':
        return std::vector<CodeRange>{{'\v', '\v'}};
      case '0':
        return std::vector<CodeRange>{{0, 0}};
      case 'x': {
        HEARTH_ASSIGN_OR_RETURN(const uint32_t v, hex_digits(2));
        return std::vector<CodeRange>{{v, v}};
      }
      case 'u': {
        uint32_t v = 0;
        if (at('{')) {
          ++i_;
          while (i_ < s_.size() && s_[i_] != '}') {
            HEARTH_ASSIGN_OR_RETURN(const uint32_t d, hex_digits(1));
            v = v * 16 + d;
            if (v > 0x10FFFF) return error("a code point above U+10FFFF");
          }
          if (!at('}')) return error("unterminated \\u{...}");
          ++i_;
        } else {
          HEARTH_ASSIGN_OR_RETURN(v, hex_digits(4));
        }
        if (v >= 0xD800 && v <= 0xDFFF) return unsupported("a surrogate code point");
        return std::vector<CodeRange>{{v, v}};
      }
      case 'b':
        if (in_class) return std::vector<CodeRange>{{'\b', '\b'}};
        return unsupported("a word boundary (\\b)");
      case 'B':
        return unsupported("\\B");
      case 'p':
      case 'P':
        return unsupported("a Unicode property class");
      default:
        if (e >= '1' && e <= '9') return unsupported("a backreference");
        if (e == 'k') return unsupported("a named backreference");
        if (std::isalnum(static_cast<unsigned char>(e))) return error(fmt::format("unknown escape \\{}", e));
        return std::vector<CodeRange>{{static_cast<uint32_t>(static_cast<unsigned char>(e)),
                                       static_cast<uint32_t>(static_cast<unsigned char>(e))}};
    }
  }

  Result<Node> escape_atom() {
    HEARTH_ASSIGN_OR_RETURN(std::vector<CodeRange> set, escape(false));
    return set_node(std::move(set));
  }

  Result<Node> char_class() {
    ++i_;  // [
    bool negated = false;
    if (at('^')) {
      negated = true;
      ++i_;
    }
    std::vector<CodeRange> set;
    bool first = true;
    while (true) {
      if (i_ >= s_.size()) return error("unterminated character class");
      if (at(']') && !first) {
        ++i_;
        break;
      }
      if (at(']')) {  // [] matches nothing and [^] anything, in JavaScript
        ++i_;
        if (!negated) return unsupported("an empty class []");
        return set_node({{0, 0x10FFFF}});
      }
      first = false;
      if (s_.substr(i_, 2) == "[:") return unsupported("a POSIX class");
      std::vector<CodeRange> lo;
      if (at('\\')) {
        HEARTH_ASSIGN_OR_RETURN(lo, escape(true));
      } else {
        HEARTH_ASSIGN_OR_RETURN(const uint32_t cp, literal_char());
        lo = {{cp, cp}};
      }
      if (lo.size() == 1 && lo[0].lo == lo[0].hi && at('-') && i_ + 1 < s_.size() && s_[i_ + 1] != ']') {
        ++i_;  // -
        std::vector<CodeRange> hi;
        if (at('\\')) {
          HEARTH_ASSIGN_OR_RETURN(hi, escape(true));
        } else {
          HEARTH_ASSIGN_OR_RETURN(const uint32_t cp, literal_char());
          hi = {{cp, cp}};
        }
        if (hi.size() != 1 || hi[0].lo != hi[0].hi) return error("a range ending in a class escape");
        if (hi[0].lo < lo[0].lo) return error("a backwards range");
        set.push_back({lo[0].lo, hi[0].lo});
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    set = normalize_ranges(std::move(set));
    if (negated) set = complement_ranges(set);
    return set_node(std::move(set));
  }

  std::string_view s_;
  size_t i_ = 0;
};

// ---- emitting GBNF ---------------------------------------------------------------------

std::string class_char(uint32_t cp) {
  if (cp >= 0x20 && cp < 0x7F && cp != ']' && cp != '\\' && cp != '^' && cp != '-' && cp != '"' && cp != '[') {
    return std::string(1, static_cast<char>(cp));
  }
  if (cp <= 0xFF) return fmt::format("\\x{:02X}", cp);
  if (cp <= 0xFFFF) return fmt::format("\\u{:04X}", cp);
  return fmt::format("\\U{:08X}", cp);
}

std::string class_text(const std::vector<CodeRange>& set) {
  std::string out = "[";
  for (const CodeRange& r : set) {
    out += class_char(r.lo);
    if (r.hi != r.lo) out += "-" + class_char(r.hi);
  }
  return out + "]";
}

std::string utf8_of(uint32_t cp) {
  std::string s;
  utf8_append(s, cp);
  return s;
}

// How JSON writes `cp` inside a string when it must be escaped.
std::string json_escaped(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\t':
      return "\\t";
    case '\r':
      return "\\r";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default:
      return fmt::format("\\u{:04x}", cp);
  }
}

bool must_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

std::string emit_set(const std::vector<CodeRange>& set, RegexTarget target) {
  if (target == RegexTarget::kText) {
    if (set.size() == 1 && set[0].lo == set[0].hi) return gbnf_literal(utf8_of(set[0].lo));
    return class_text(set);
  }
  std::vector<CodeRange> plain;
  std::vector<std::string> alts;
  for (const CodeRange& r : set) {
    uint32_t lo = r.lo;
    while (lo <= r.hi) {
      if (must_escape(lo)) {
        alts.push_back(gbnf_literal(json_escaped(lo)));
        ++lo;
        continue;
      }
      uint32_t hi = lo;
      while (hi < r.hi && !must_escape(hi + 1)) ++hi;
      plain.push_back({lo, hi});
      lo = hi + 1;
    }
  }
  if (!plain.empty()) {
    alts.insert(alts.begin(), plain.size() == 1 && plain[0].lo == plain[0].hi ? gbnf_literal(utf8_of(plain[0].lo))
                                                                              : class_text(plain));
  }
  if (alts.size() == 1) return alts[0];
  return "(" + fmt::format("{}", fmt::join(alts, " | ")) + ")";
}

std::string emit(const Node& n, RegexTarget target) {
  switch (n.kind) {
    case Node::Kind::kSet:
      return emit_set(n.set, target);
    case Node::Kind::kSeq: {
      if (n.children.empty()) return "\"\"";
      std::vector<std::string> parts;
      for (const Node& c : n.children) parts.push_back(emit(c, target));
      return "(" + fmt::format("{}", fmt::join(parts, " ")) + ")";
    }
    case Node::Kind::kAlt: {
      std::vector<std::string> parts;
      for (const Node& c : n.children) parts.push_back(emit(c, target));
      return "(" + fmt::format("{}", fmt::join(parts, " | ")) + ")";
    }
    case Node::Kind::kRepeat: {
      const std::string inner = "(" + emit(n.children[0], target) + ")";
      if (n.min == 0 && n.max < 0) return inner + "*";
      if (n.min == 1 && n.max < 0) return inner + "+";
      if (n.min == 0 && n.max == 1) return inner + "?";
      if (n.max < 0) return fmt::format("{}{{{},}}", inner, n.min);
      if (n.min == n.max) return fmt::format("{}{{{}}}", inner, n.min);
      return fmt::format("{}{{{},{}}}", inner, n.min, n.max);
    }
  }
  return "\"\"";
}

// Whether `s` has a `|` outside every group and class.
bool top_level_alternation(std::string_view s) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      if (c == ']') in_class = false;
    } else if (c == '[') {
      in_class = true;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      --depth;
    } else if (c == '|' && depth == 0) {
      return true;
    }
  }
  return false;
}

// Whether the `$` at the end of `s` is an anchor (not escaped).
bool ends_with_anchor(std::string_view s) {
  if (s.empty() || s.back() != '$') return false;
  size_t backslashes = 0;
  for (size_t i = s.size() - 1; i-- > 0 && s[i] == '\\';) ++backslashes;
  return backslashes % 2 == 0;
}

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern, RegexTarget target) {
  if (pattern.size() > 65536) return make_error(ErrorCode::kInvalidArgument, "the pattern is longer than 64 KiB");
  const bool start = pattern.starts_with('^');
  const bool end = ends_with_anchor(pattern);
  std::string_view body = pattern;
  if (start) body.remove_prefix(1);
  if (end) body.remove_suffix(1);
  if ((start || end) && top_level_alternation(body)) {
    return make_error(ErrorCode::kUnsupported,
                      "pattern \"{}\": ^ and $ around an alternation apply to its first and last branch only; write "
                      "^(...)$ to anchor all of it",
                      pattern.substr(0, 40));
  }
  RegexParser parser(body);
  HEARTH_ASSIGN_OR_RETURN(const Node root, parser.parse());
  std::string out = emit(root, target);
  if (target == RegexTarget::kJsonString) {
    // Anything a JSON string may hold, where the pattern is not anchored.
    constexpr std::string_view kAny = R"(([^"\\\x00-\x1F] | "\\" ["\\/bfnrt])*)";
    if (!start) out = std::string(kAny) + " " + out;
    if (!end) out = out + " " + std::string(kAny);
  }
  return "(" + out + ")";
}

}  // namespace hearth::grammar
