#include "grammar/grammar.h"

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_map>
#include <utility>

#include "grammar/utf8_ranges.h"

namespace hearth::grammar {
namespace {

// ---- the parse tree ------------------------------------------------------------------

struct Expr {
  enum class Kind : uint8_t { kAlt, kSeq, kLiteral, kClass, kAny, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<Expr> children;  // kAlt, kSeq; kRepeat: one
  std::string text;            // kLiteral: UTF-8 bytes; kRef: the name
  std::vector<CodeRange> ranges;  // kClass, as written
  bool negated = false;           // kClass
  int64_t min = 0, max = 0;       // kRepeat; max < 0: unbounded
  size_t line = 0, column = 0;    // kRef: where it is used
};

struct RuleDef {
  std::string name;
  Expr body;
  size_t line = 0, column = 0;
};

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

class Parser {
 public:
  Parser(std::string_view text, const GrammarLimits& limits) : s_(text), limits_(limits) {}

  Result<std::vector<RuleDef>> parse() {
    std::vector<RuleDef> rules;
    skip(/*newlines=*/true);
    while (i_ < s_.size()) {
      RuleDef def;
      def.line = line_;
      def.column = column();
      def.name = name();
      if (def.name.empty()) return error("expected a rule name");
      skip(true);
      if (s_.substr(i_, 3) != "::=") return error(fmt::format("expected ::= after the rule name {}", def.name));
      advance(3);
      HEARTH_ASSIGN_OR_RETURN(def.body, alternatives(/*nested=*/false, 0));
      rules.push_back(std::move(def));
      skip(true);
    }
    return rules;
  }

 private:
  Status error(std::string_view what) const {
    return make_error(ErrorCode::kInvalidArgument, "grammar line {}, column {}: {}", line_, column(), what);
  }
  size_t column() const { return i_ - line_start_ + 1; }
  void advance(size_t n = 1) {
    for (size_t k = 0; k < n && i_ < s_.size(); ++k) {
      if (s_[i_] == '\n') {
        ++line_;
        line_start_ = i_ + 1;
      }
      ++i_;
    }
  }
  // Skips spaces and comments; newlines too when `newlines`.
  void skip(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        advance();
      } else if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') advance();
      } else {
        break;
      }
    }
  }
  std::string name() {
    const size_t b = i_;
    while (i_ < s_.size() && is_name_char(s_[i_])) advance();
    return std::string(s_.substr(b, i_ - b));
  }
  // Whether a new rule (`name ::=`) begins at `pos`.
  bool rule_starts_at(size_t pos) const {
    size_t p = pos;
    while (p < s_.size() && is_name_char(s_[p])) ++p;
    if (p == pos) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\r' || s_[p] == '\n')) ++p;
    return s_.substr(p, 3) == "::=";
  }
  // Skips what separates two items; false when the sequence ends here (a top-level
  // sequence ends at a newline followed by the next rule or the end of the text).
  bool between_items(bool nested) {
    skip(nested);
    if (nested || i_ >= s_.size() || s_[i_] != '\n') return true;
    size_t p = i_;
    while (p < s_.size()) {
      const char c = s_[p];
      if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
        ++p;
      } else if (c == '#') {
        while (p < s_.size() && s_[p] != '\n') ++p;
      } else {
        break;
      }
    }
    if (p >= s_.size() || rule_starts_at(p)) return false;
    skip(true);
    return true;
  }

  Result<Expr> alternatives(bool nested, int depth) {
    if (depth > 200) return error("groups nest more than 200 deep");
    Expr alt;
    alt.kind = Expr::Kind::kAlt;
    HEARTH_ASSIGN_OR_RETURN(Expr first, sequence(nested, depth));
    alt.children.push_back(std::move(first));
    while (i_ < s_.size() && s_[i_] == '|') {
      advance();
      skip(true);
      HEARTH_ASSIGN_OR_RETURN(Expr next, sequence(nested, depth));
      alt.children.push_back(std::move(next));
    }
    if (alt.children.size() == 1) return std::move(alt.children[0]);
    return alt;
  }

  Result<Expr> sequence(bool nested, int depth) {
    Expr seq;
    seq.kind = Expr::Kind::kSeq;
    skip(nested);
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '|' || c == ')' || c == '\n') {
        if (c != '\n') break;
        if (!between_items(nested)) break;
        continue;
      }
      Expr item;
      if (c == '"') {
        HEARTH_ASSIGN_OR_RETURN(item, literal());
      } else if (c == '[') {
        HEARTH_ASSIGN_OR_RETURN(item, char_class());
      } else if (c == '.') {
        advance();
        item.kind = Expr::Kind::kAny;
      } else if (c == '(') {
        advance();
        skip(true);
        HEARTH_ASSIGN_OR_RETURN(item, alternatives(true, depth + 1));
        skip(true);
        if (i_ >= s_.size() || s_[i_] != ')') return error("expected ) to close the group");
        advance();
      } else if (is_name_char(c)) {
        item.kind = Expr::Kind::kRef;
        item.line = line_;
        item.column = column();
        item.text = name();
      } else {
        return error(fmt::format("unexpected character '{}'", c));
      }
      HEARTH_RETURN_IF_ERROR(postfix(item));
      seq.children.push_back(std::move(item));
      if (!between_items(nested)) break;
    }
    return seq;
  }

  Status postfix(Expr& item) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      int64_t lo = 0, hi = 0;
      if (c == '*') {
        lo = 0, hi = -1;
        advance();
      } else if (c == '+') {
        lo = 1, hi = -1;
        advance();
      } else if (c == '?') {
        lo = 0, hi = 1;
        advance();
      } else if (c == '{') {
        advance();
        skip(false);
        HEARTH_ASSIGN_OR_RETURN(lo, number());
        skip(false);
        hi = lo;
        if (i_ < s_.size() && s_[i_] == ',') {
          advance();
          skip(false);
          if (i_ < s_.size() && s_[i_] == '}') {
            hi = -1;
          } else {
            HEARTH_ASSIGN_OR_RETURN(hi, number());
            skip(false);
          }
        }
        if (i_ >= s_.size() || s_[i_] != '}') return error("expected } to close the repetition");
        advance();
        if (hi >= 0 && hi < lo) return error(fmt::format("repetition {{{},{}}} has its maximum below its minimum", lo, hi));
      } else {
        break;
      }
      Expr rep;
      rep.kind = Expr::Kind::kRepeat;
      rep.min = lo;
      rep.max = hi;
      rep.children.push_back(std::move(item));
      item = std::move(rep);
    }
    return Status::ok();
  }

  Result<int64_t> number() {
    const size_t b = i_;
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      v = v * 10 + (s_[i_] - '0');
      if (v > limits_.max_repetition) {
        return error(fmt::format("a repetition count is larger than {}", limits_.max_repetition));
      }
      advance();
    }
    if (i_ == b) return error("expected a number");
    return v;
  }

  // One character of a literal or class, escapes decoded, as a code point.
  Result<uint32_t> character() {
    if (i_ >= s_.size()) return error("unexpected end of the grammar");
    const auto c = static_cast<unsigned char>(s_[i_]);
    if (c == '\\') {
      advance();
      if (i_ >= s_.size()) return error("unfinished escape");
      const char e = s_[i_];
      advance();
      switch (e) {
        case 'n':
          return uint32_t{'\n'};
        case 't':
          return uint32_t{'\t'};
        case 'r':
          return uint32_t{'\r'};
        case 'f':
          return uint32_t{'\f'};
        case 'b':
          return uint32_t{'\b'};
        case '0':
          return uint32_t{0};
        case '\\':
        case '"':
        case '\'':
        case '[':
        case ']':
        case '-':
        case '^':
        case '/':
          return static_cast<uint32_t>(e);
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        default:
          return error(fmt::format("unknown escape \\{}", e));
      }
    }
    if (c < 0x80) {
      advance();
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
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return error("invalid UTF-8");
    advance(len);
    return cp;
  }
  Result<uint32_t> hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (i_ >= s_.size()) return error("unfinished escape");
      const char h = s_[i_];
      uint32_t d = 0;
      if (h >= '0' && h <= '9') {
        d = static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        d = static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        d = static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return error("expected a hex digit in the escape");
      }
      v = v * 16 + d;
      advance();
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return error(fmt::format("U+{:X} is not a character", v));
    return v;
  }

  Result<Expr> literal() {
    advance();  // "
    Expr e;
    e.kind = Expr::Kind::kLiteral;
    while (true) {
      if (i_ >= s_.size()) return error("unterminated string literal");
      if (s_[i_] == '"') {
        advance();
        break;
      }
      HEARTH_ASSIGN_OR_RETURN(const uint32_t cp, character());
      utf8_append(e.text, cp);
    }
    return e;
  }

  Result<Expr> char_class() {
    advance();  // [
    Expr e;
    e.kind = Expr::Kind::kClass;
    if (i_ < s_.size() && s_[i_] == '^') {
      e.negated = true;
      advance();
    }
    while (true) {
      if (i_ >= s_.size()) return error("unterminated character class");
      if (s_[i_] == ']') {
        advance();
        break;
      }
      HEARTH_ASSIGN_OR_RETURN(const uint32_t lo, character());
      uint32_t hi = lo;
      if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
        advance();
        HEARTH_ASSIGN_OR_RETURN(hi, character());
        if (hi < lo) return error(fmt::format("the range U+{:X}-U+{:X} is backwards", lo, hi));
      }
      e.ranges.push_back({lo, hi});
    }
    return e;
  }

  std::string_view s_;
  const GrammarLimits& limits_;
  size_t i_ = 0;
  size_t line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

// ---- lowering to the flat form ---------------------------------------------------------

class GrammarBuilder {
 public:
  explicit GrammarBuilder(const GrammarLimits& limits) : limits_(limits) {}

  Result<Grammar> build(std::vector<RuleDef>& defs, std::string_view root) {
    for (const RuleDef& d : defs) {
      if (names_.contains(d.name) && defined_[names_.at(d.name)]) {
        return make_error(ErrorCode::kInvalidArgument, "grammar line {}: the rule {} is defined twice", d.line,
                          d.name);
      }
      defined_[rule_id(d.name)] = true;
    }
    const auto root_it = names_.find(std::string(root));
    if (root_it == names_.end()) {
      return make_error(ErrorCode::kInvalidArgument, "the grammar has no rule named {}", root);
    }
    for (RuleDef& d : defs) {
      const uint32_t id = names_.at(d.name);
      HEARTH_ASSIGN_OR_RETURN(rules_[id], alternatives(d.body, d.name));
    }
    for (const auto& [name, id] : names_) {
      if (!defined_[id]) {
        const auto [line, column] = first_use_.at(id);
        return make_error(ErrorCode::kInvalidArgument, "grammar line {}, column {}: the rule {} is not defined", line,
                          column, name);
      }
    }
    return finish(root_it->second);
  }

 private:
  using Alternatives = std::vector<std::vector<Element>>;

  uint32_t rule_id(const std::string& name) {
    const auto it = names_.find(name);
    if (it != names_.end()) return it->second;
    const auto id = static_cast<uint32_t>(rules_.size());
    rules_.emplace_back();
    rule_names_.push_back(name);
    defined_.push_back(false);
    names_.emplace(name, id);
    return id;
  }
  uint32_t new_rule(std::string name, Alternatives alts) {
    const auto id = static_cast<uint32_t>(rules_.size());
    rules_.push_back(std::move(alts));
    rule_names_.push_back(std::move(name));
    defined_.push_back(true);
    return id;
  }
  uint32_t set_index(const ByteSet& set) {
    const auto it = std::find(sets_.begin(), sets_.end(), set);
    if (it != sets_.end()) return static_cast<uint32_t>(it - sets_.begin());
    sets_.push_back(set);
    return static_cast<uint32_t>(sets_.size() - 1);
  }
  Element bytes(const ByteSet& set) { return {ElementKind::kBytes, set_index(set)}; }
  Element byte(uint8_t b) {
    ByteSet s;
    s.set(b);
    return bytes(s);
  }
  static Element rule(uint32_t id) { return {ElementKind::kRule, id}; }

  Status count(size_t n) {
    elements_ += n;
    if (elements_ > limits_.max_elements) {
      return make_error(ErrorCode::kInvalidArgument,
                        "the grammar expands to more than {} elements (large repetition counts multiply)",
                        limits_.max_elements);
    }
    return Status::ok();
  }

  Result<Alternatives> alternatives(const Expr& e, const std::string& hint) {
    Alternatives out;
    if (e.kind == Expr::Kind::kAlt) {
      for (const Expr& c : e.children) {
        std::vector<Element> seq;
        HEARTH_RETURN_IF_ERROR(sequence(c, hint, seq));
        out.push_back(std::move(seq));
      }
    } else {
      std::vector<Element> seq;
      HEARTH_RETURN_IF_ERROR(sequence(e, hint, seq));
      out.push_back(std::move(seq));
    }
    return out;
  }

  Status sequence(const Expr& e, const std::string& hint, std::vector<Element>& out) {
    if (e.kind == Expr::Kind::kSeq) {
      for (const Expr& c : e.children) HEARTH_RETURN_IF_ERROR(item(c, hint, out));
      return Status::ok();
    }
    return item(e, hint, out);
  }

  // The rule matching one character of `ranges` (normalised), in UTF-8.
  Element character_class(std::vector<CodeRange> ranges) {
    if (!ranges.empty() && ranges.back().hi <= 0x7F) {
      ByteSet s;
      for (const CodeRange& r : ranges) s.set_range(static_cast<uint8_t>(r.lo), static_cast<uint8_t>(r.hi));
      return bytes(s);
    }
    const auto cached = class_rules_.find(ranges);
    if (cached != class_rules_.end()) return rule(cached->second);
    Alternatives alts;
    ByteSet ascii;
    for (const auto& seq : utf8_sequences(ranges)) {
      if (seq.size() == 1) {
        ascii.set_range(seq[0].first, seq[0].second);
        continue;
      }
      std::vector<Element> s;
      for (const auto& [lo, hi] : seq) {
        ByteSet b;
        b.set_range(lo, hi);
        s.push_back(bytes(b));
      }
      alts.push_back(std::move(s));
    }
    if (!ascii.empty()) alts.insert(alts.begin(), std::vector<Element>{bytes(ascii)});
    const uint32_t id = new_rule(fmt::format("[class {}]", class_rules_.size()), std::move(alts));
    class_rules_.emplace(std::move(ranges), id);
    return rule(id);
  }

  // One element standing for `e` (a rule of its own unless it is a single element).
  Result<Element> unit(const Expr& e, const std::string& hint) {
    std::vector<Element> seq;
    if (e.kind != Expr::Kind::kAlt) {
      HEARTH_RETURN_IF_ERROR(sequence(e, hint, seq));
      if (seq.size() == 1) return seq[0];
      HEARTH_RETURN_IF_ERROR(count(seq.size() + 1));
      return rule(new_rule(hint + "-group", Alternatives{std::move(seq)}));
    }
    HEARTH_ASSIGN_OR_RETURN(Alternatives alts, alternatives(e, hint));
    for (const auto& a : alts) HEARTH_RETURN_IF_ERROR(count(a.size() + 1));
    return rule(new_rule(hint + "-group", std::move(alts)));
  }

  Status item(const Expr& e, const std::string& hint, std::vector<Element>& out) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        HEARTH_RETURN_IF_ERROR(count(e.text.size()));
        for (const char c : e.text) out.push_back(byte(static_cast<uint8_t>(c)));
        return Status::ok();
      case Expr::Kind::kClass: {
        std::vector<CodeRange> ranges = normalize_ranges(e.ranges);
        if (e.negated) ranges = complement_ranges(ranges);
        if (ranges.empty()) return make_error(ErrorCode::kInvalidArgument, "rule {}: a class matches no character", hint);
        HEARTH_RETURN_IF_ERROR(count(1));
        out.push_back(character_class(std::move(ranges)));
        return Status::ok();
      }
      case Expr::Kind::kAny:
        HEARTH_RETURN_IF_ERROR(count(1));
        out.push_back(character_class({{0, 0x10FFFF}}));
        return Status::ok();
      case Expr::Kind::kRef: {
        const uint32_t id = rule_id(e.text);
        first_use_.emplace(id, std::pair(e.line, e.column));
        HEARTH_RETURN_IF_ERROR(count(1));
        out.push_back(rule(id));
        return Status::ok();
      }
      case Expr::Kind::kAlt:
      case Expr::Kind::kSeq: {
        if (e.kind == Expr::Kind::kSeq) return sequence(e, hint, out);
        HEARTH_ASSIGN_OR_RETURN(const Element u, unit(e, hint));
        HEARTH_RETURN_IF_ERROR(count(1));
        out.push_back(u);
        return Status::ok();
      }
      case Expr::Kind::kRepeat: {
        HEARTH_ASSIGN_OR_RETURN(const Element u, unit(e.children[0], hint));
        HEARTH_RETURN_IF_ERROR(count(static_cast<size_t>(e.min) + 1));
        for (int64_t k = 0; k < e.min; ++k) out.push_back(u);
        if (e.max < 0) {  // star: S ::= u S | ""
          const auto id = static_cast<uint32_t>(rules_.size());
          HEARTH_RETURN_IF_ERROR(count(4));
          new_rule(hint + "-star", Alternatives{{u, rule(id)}, {}});
          out.push_back(rule(id));
        } else if (e.max > e.min) {  // n nested optionals: O1 ::= u O2 | "", ..., On ::= u | ""
          const int64_t n = e.max - e.min;
          HEARTH_RETURN_IF_ERROR(count(static_cast<size_t>(n) * 4));
          std::optional<uint32_t> next;
          for (int64_t k = 0; k < n; ++k) {
            std::vector<Element> take{u};
            if (next) take.push_back(rule(*next));
            next = new_rule(hint + "-opt", Alternatives{std::move(take), {}});
          }
          out.push_back(rule(*next));
        }
        return Status::ok();
      }
    }
    return make_error(ErrorCode::kInternal, "unknown grammar expression");
  }

  Result<Grammar> finish(uint32_t root) {
    Grammar g;
    g.rule_alts_.push_back(0);
    for (const Alternatives& alts : rules_) {
      for (const auto& seq : alts) {
        g.alt_starts_.push_back(static_cast<uint32_t>(g.elements_.size()));
        g.elements_.insert(g.elements_.end(), seq.begin(), seq.end());
        g.elements_.push_back({ElementKind::kEnd, 0});
      }
      g.rule_alts_.push_back(static_cast<uint32_t>(g.alt_starts_.size()));
    }
    g.start_ = static_cast<uint32_t>(g.elements_.size());
    g.elements_.push_back(rule(root));
    g.elements_.push_back({ElementKind::kEnd, 0});
    g.sets_ = std::move(sets_);
    g.names_ = std::move(rule_names_);
    HEARTH_RETURN_IF_ERROR(check_left_recursion(g));
    return g;
  }

  // A rule that can begin with itself (through rules that may match nothing) would be
  // expanded forever by the matcher.
  static Status check_left_recursion(const Grammar& g) {
    const size_t n = g.n_rules();
    std::vector<uint8_t> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (uint32_t a : g.alternatives(static_cast<uint32_t>(r))) {
          uint32_t p = a;
          while (g.element(p).kind == ElementKind::kRule && nullable[g.element(p).value]) ++p;
          if (g.element(p).kind == ElementKind::kEnd) {
            nullable[r] = 1;
            changed = true;
            break;
          }
        }
      }
    }
    // Rules each rule may begin with.
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      for (uint32_t a : g.alternatives(static_cast<uint32_t>(r))) {
        for (uint32_t p = a; g.element(p).kind == ElementKind::kRule; ++p) {
          first[r].push_back(g.element(p).value);
          if (!nullable[g.element(p).value]) break;
        }
      }
    }
    // Depth-first search for a cycle; iterative, so deep grammars cannot overflow.
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t s = 0; s < n; ++s) {
      if (color[s] != 0) continue;
      std::vector<std::pair<uint32_t, size_t>> stack{{static_cast<uint32_t>(s), 0}};
      color[s] = 1;
      while (!stack.empty()) {
        auto& [r, k] = stack.back();
        if (k < first[r].size()) {
          const uint32_t next = first[r][k++];
          if (color[next] == 1) {
            return make_error(ErrorCode::kInvalidArgument,
                              "the rule {} is left-recursive (it can begin with itself, so it would be expanded "
                              "forever): write the repetition with * or + instead",
                              g.rule_name(next));
          }
          if (color[next] == 0) {
            color[next] = 1;
            stack.emplace_back(next, 0);
          }
        } else {
          color[r] = 2;
          stack.pop_back();
        }
      }
    }
    return Status::ok();
  }

  const GrammarLimits& limits_;
  std::vector<Alternatives> rules_;
  std::vector<std::string> rule_names_;
  std::vector<bool> defined_;
  std::unordered_map<std::string, uint32_t> names_;
  std::unordered_map<uint32_t, std::pair<size_t, size_t>> first_use_;
  std::vector<ByteSet> sets_;
  std::map<std::vector<CodeRange>, uint32_t> class_rules_;
  size_t elements_ = 0;
};

Result<Grammar> Grammar::parse(std::string_view text, std::string_view root, const GrammarLimits& limits) {
  if (text.size() > limits.max_text_bytes) {
    return make_error(ErrorCode::kInvalidArgument, "the grammar has {} bytes; at most {} are accepted", text.size(),
                      limits.max_text_bytes);
  }
  Parser parser(text, limits);
  HEARTH_ASSIGN_OR_RETURN(std::vector<RuleDef> defs, parser.parse());
  if (defs.empty()) return make_error(ErrorCode::kInvalidArgument, "the grammar has no rules");
  GrammarBuilder builder(limits);
  return builder.build(defs, root);
}

namespace {
int32_t sat_add(int32_t a, int32_t b) { return std::min<int64_t>(int64_t{a} + b, kUnreachable); }
}  // namespace

std::vector<int32_t> Grammar::min_rest(const ByteSet& allowed) const {
  const size_t n = n_rules();
  std::vector<int32_t> rule_min(n, kUnreachable);
  std::vector<uint8_t> set_ok(sets_.size());
  for (size_t i = 0; i < sets_.size(); ++i) set_ok[i] = sets_[i].intersects(allowed) ? 1 : 0;
  auto cost = [&](const Element& e) -> int32_t {
    if (e.kind == ElementKind::kBytes) return set_ok[e.value] ? 1 : kUnreachable;
    return rule_min[e.value];
  };
  // The rest of an alternative from `a`, from the rule minimums known so far.
  auto rest_from = [&](uint32_t a) {
    int32_t total = 0;
    for (uint32_t p = a; elements_[p].kind != ElementKind::kEnd && total < kUnreachable; ++p) {
      total = sat_add(total, cost(elements_[p]));
    }
    return total;
  };
  // Minimums only fall; later rules (often the parts of earlier ones) go first.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = n; r-- > 0;) {
      for (uint32_t a : alternatives(static_cast<uint32_t>(r))) {
        const int32_t v = rest_from(a);
        if (v < rule_min[r]) {
          rule_min[r] = v;
          changed = true;
        }
      }
    }
  }
  std::vector<int32_t> rest(elements_.size(), 0);
  for (size_t p = elements_.size(); p-- > 0;) {
    const Element& e = elements_[p];
    rest[p] = e.kind == ElementKind::kEnd ? 0 : sat_add(cost(e), rest[p + 1]);
  }
  return rest;
}

int32_t Grammar::min_length(const ByteSet& allowed) const { return min_rest(allowed)[start_]; }

std::string gbnf_literal(std::string_view bytes) {
  std::string out = "\"";
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (u < 0x20 || u == 0x7F) {
          out += fmt::format("\\x{:02X}", u);
        } else {
          out += c;  // printable ASCII, or a byte of a UTF-8 character
        }
    }
  }
  out += '"';
  return out;
}

}  // namespace hearth::grammar
