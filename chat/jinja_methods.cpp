// Python methods of str, dict and list as templates call them, and Python's string
// operations (case mapping, strip, split, replace, % and str.format formatting).
#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "chat/jinja_builtins.h"
#include "chat/jinja_interpreter.h"
#include "common/utf8.h"

namespace hearth::jinja {
namespace {

using MethodFn = Result<Value> (*)(Interpreter&, const Value& self, CallArgs&);

struct Method {
  std::string_view name;
  MethodFn fn;
};

Status type_error(std::string message) { return Status(ErrorCode::kInvalidArgument, std::move(message)); }

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> cps;
  size_t pos = 0;
  while (pos < s.size()) cps.push_back(utf8_next(s, pos));
  return cps;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8_append(out, cps[i]);
  return out;
}

bool is_cased(char32_t cp) { return u_hasBinaryProperty(static_cast<UChar32>(cp), UCHAR_CASED) != 0; }

void append_title(std::string& out, char32_t cp) {
  utf8_append(out, static_cast<char32_t>(u_totitle(static_cast<UChar32>(cp))));
}

// Byte range of the code points [start:end] of s, with Python's slice clamping.
std::pair<size_t, size_t> byte_range(std::string_view s, const std::optional<Value>& start,
                                     const std::optional<Value>& end) {
  if ((!start || start->is_none()) && (!end || end->is_none())) return {0, s.size()};
  const std::vector<size_t> offsets = utf8_offsets(s);
  const auto n = static_cast<int64_t>(offsets.size() - 1);
  auto clamp = [n](const std::optional<Value>& v, int64_t fallback) {
    if (!v || v->is_none() || !(v->is_int() || v->is_bool())) return fallback;
    int64_t i = v->to_int();
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n);
  };
  const int64_t b = clamp(start, 0), e = clamp(end, n);
  if (e <= b) return {offsets[static_cast<size_t>(b)], offsets[static_cast<size_t>(b)]};
  return {offsets[static_cast<size_t>(b)], offsets[static_cast<size_t>(e)]};
}

size_t code_point_index(std::string_view s, size_t byte_offset) { return utf8_length(s.substr(0, byte_offset)); }

// ---- str methods ----------------------------------------------------------------------

Result<Value> str_strip_impl(const Value& self, CallArgs& args, std::string_view fn, bool left, bool right) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"chars"}));
  if (a[0] && !a[0]->is_none()) {
    HEARTH_ASSIGN_OR_RETURN(std::string chars, want_string(fn, *a[0]));
    return Value::string(py_strip(self.as_string(), &chars, left, right));
  }
  return Value::string(py_strip(self.as_string(), nullptr, left, right));
}

Result<Value> str_strip(Interpreter&, const Value& self, CallArgs& args) {
  return str_strip_impl(self, args, "strip", true, true);
}
Result<Value> str_lstrip(Interpreter&, const Value& self, CallArgs& args) {
  return str_strip_impl(self, args, "lstrip", true, false);
}
Result<Value> str_rstrip(Interpreter&, const Value& self, CallArgs& args) {
  return str_strip_impl(self, args, "rstrip", false, true);
}

Result<Value> str_affix_impl(const Value& self, CallArgs& args, std::string_view fn, bool prefix) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"affix", "start", "end"}));
  if (!a[0]) return type_error(fmt::format("{}() takes at least 1 argument (0 given)", fn));
  const auto [b, e] = byte_range(self.as_string(), a[1], a[2]);
  const std::string_view s = std::string_view(self.as_string()).substr(b, e - b);
  std::vector<Value> candidates;
  if (a[0]->is_tuple()) {
    candidates = a[0]->as_list().items;
  } else {
    candidates.push_back(*a[0]);
  }
  for (const Value& c : candidates) {
    if (!c.is_string()) {
      return type_error(fmt::format("{} first arg must be str or a tuple of str, not {}", fn, c.type_name()));
    }
    const std::string& affix = c.as_string();
    if (affix.size() > s.size()) continue;
    if (prefix ? s.substr(0, affix.size()) == affix : s.substr(s.size() - affix.size()) == affix) {
      return Value::boolean(true);
    }
  }
  return Value::boolean(false);
}

Result<Value> str_startswith(Interpreter&, const Value& self, CallArgs& args) {
  return str_affix_impl(self, args, "startswith", true);
}
Result<Value> str_endswith(Interpreter&, const Value& self, CallArgs& args) {
  return str_affix_impl(self, args, "endswith", false);
}

Result<Value> make_string_list(Interpreter& interp, std::vector<std::string> parts) {
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(parts.size() * 8));
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

Result<Value> str_split_impl(Interpreter& interp, const Value& self, CallArgs& args, bool from_right) {
  const std::string_view fn = from_right ? "rsplit" : "split";
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"sep", "maxsplit"}));
  int64_t maxsplit = -1;
  if (a[1]) {
    HEARTH_ASSIGN_OR_RETURN(maxsplit, want_int(fn, *a[1]));
  }
  const std::string& s = self.as_string();
  std::vector<std::string> parts;
  if (!a[0] || a[0]->is_none()) {
    // Runs of whitespace separate; none at either end makes an empty part.
    const std::vector<char32_t> cps = code_points(s);
    if (!from_right) {
      size_t i = 0;
      while (true) {
        while (i < cps.size() && is_py_space(cps[i])) ++i;
        if (i >= cps.size()) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
          size_t end = cps.size();
          parts.push_back(from_code_points(cps, i, end));
          break;
        }
        size_t j = i;
        while (j < cps.size() && !is_py_space(cps[j])) ++j;
        parts.push_back(from_code_points(cps, i, j));
        i = j;
      }
    } else {
      size_t i = cps.size();
      while (true) {
        while (i > 0 && is_py_space(cps[i - 1])) --i;
        if (i == 0) break;
        if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
          parts.push_back(from_code_points(cps, 0, i));
          break;
        }
        size_t j = i;
        while (j > 0 && !is_py_space(cps[j - 1])) --j;
        parts.push_back(from_code_points(cps, j, i));
        i = j;
      }
      std::reverse(parts.begin(), parts.end());
    }
    return make_string_list(interp, std::move(parts));
  }
  HEARTH_ASSIGN_OR_RETURN(std::string sep, want_string(fn, *a[0]));
  if (sep.empty()) return type_error("empty separator");
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(s.size()));
  if (!from_right) {
    size_t start = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = s.find(sep, start);
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(start, hit - start));
      start = hit + sep.size();
    }
    parts.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep.size()) break;
      const size_t hit = s.rfind(sep, end - sep.size());
      if (hit == std::string::npos) break;
      parts.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
      end = hit;
    }
    parts.push_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
  }
  return make_string_list(interp, std::move(parts));
}

Result<Value> str_split(Interpreter& interp, const Value& self, CallArgs& args) {
  return str_split_impl(interp, self, args, false);
}
Result<Value> str_rsplit(Interpreter& interp, const Value& self, CallArgs& args) {
  return str_split_impl(interp, self, args, true);
}

Result<Value> str_splitlines(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("splitlines", args, {"keepends"}));
  if (a[0] && a[0]->truthy()) return Status(ErrorCode::kUnsupported, "splitlines(keepends=True) is not supported");
  return make_string_list(interp, py_splitlines(self.as_string()));
}

Result<Value> str_case(const Value& self, CallArgs& args, std::string_view fn, std::string (*op)(std::string_view)) {
  HEARTH_RETURN_IF_ERROR(bind_args(fn, args, {}).status());
  return Value::string(op(self.as_string()));
}

Result<Value> str_upper(Interpreter&, const Value& self, CallArgs& args) {
  return str_case(self, args, "upper", py_upper);
}
Result<Value> str_lower(Interpreter&, const Value& self, CallArgs& args) {
  return str_case(self, args, "lower", py_lower);
}
Result<Value> str_title(Interpreter&, const Value& self, CallArgs& args) {
  return str_case(self, args, "title", py_title);
}
Result<Value> str_capitalize(Interpreter&, const Value& self, CallArgs& args) {
  return str_case(self, args, "capitalize", py_capitalize);
}

Result<Value> str_replace(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("replace", args, {"old", "new", "count"}));
  if (!a[0] || !a[1]) return type_error("replace() takes at least 2 arguments");
  HEARTH_ASSIGN_OR_RETURN(std::string old, want_string("replace", *a[0]));
  HEARTH_ASSIGN_OR_RETURN(std::string repl, want_string("replace", *a[1]));
  int64_t count = -1;
  if (a[2]) {
    HEARTH_ASSIGN_OR_RETURN(count, want_int("replace", *a[2]));
  }
  HEARTH_ASSIGN_OR_RETURN(std::string out, py_replace(interp, self.as_string(), old, repl, count));
  return Value::string(std::move(out));
}

Result<Value> str_find_impl(const Value& self, CallArgs& args, std::string_view fn, bool from_right, bool raise) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"sub", "start", "end"}));
  if (!a[0]) return type_error(fmt::format("{}() takes at least 1 argument (0 given)", fn));
  HEARTH_ASSIGN_OR_RETURN(std::string sub, want_string(fn, *a[0]));
  const std::string& s = self.as_string();
  const auto [b, e] = byte_range(s, a[1], a[2]);
  const std::string_view window = std::string_view(s).substr(b, e - b);
  const size_t hit = from_right ? window.rfind(sub) : window.find(sub);
  if (hit == std::string_view::npos) {
    if (raise) return type_error("substring not found");
    return Value::integer(-1);
  }
  return Value::integer(static_cast<int64_t>(code_point_index(s, b + hit)));
}

Result<Value> str_find(Interpreter&, const Value& self, CallArgs& args) {
  return str_find_impl(self, args, "find", false, false);
}
Result<Value> str_rfind(Interpreter&, const Value& self, CallArgs& args) {
  return str_find_impl(self, args, "rfind", true, false);
}
Result<Value> str_index(Interpreter&, const Value& self, CallArgs& args) {
  return str_find_impl(self, args, "index", false, true);
}
Result<Value> str_rindex(Interpreter&, const Value& self, CallArgs& args) {
  return str_find_impl(self, args, "rindex", true, true);
}

Result<Value> str_count(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("count", args, {"sub", "start", "end"}));
  if (!a[0]) return type_error("count() takes at least 1 argument (0 given)");
  HEARTH_ASSIGN_OR_RETURN(std::string sub, want_string("count", *a[0]));
  const auto [b, e] = byte_range(self.as_string(), a[1], a[2]);
  const std::string_view window = std::string_view(self.as_string()).substr(b, e - b);
  if (sub.empty()) return Value::integer(static_cast<int64_t>(utf8_length(window) + 1));
  int64_t n = 0;
  for (size_t pos = window.find(sub); pos != std::string_view::npos; pos = window.find(sub, pos + sub.size())) ++n;
  return Value::integer(n);
}

Result<Value> str_join(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("join", args, {"iterable"}));
  if (!a[0]) return type_error("join() takes exactly one argument (0 given)");
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(*a[0]));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string()) {
      return type_error(fmt::format("sequence item {}: expected str instance, {} found", i, items[i].type_name()));
    }
    if (i > 0) out += self.as_string();
    out += items[i].as_string();
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size() / 64 + items[i].as_string().size()));
  }
  return Value::string(std::move(out));
}

template <bool (*Pred)(char32_t)>
Result<Value> str_is(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("is...", args, {}).status());
  const std::string& s = self.as_string();
  if (s.empty()) return Value::boolean(false);
  size_t pos = 0;
  while (pos < s.size()) {
    if (!Pred(utf8_next(s, pos))) return Value::boolean(false);
  }
  return Value::boolean(true);
}

bool cp_digit(char32_t c) { return u_isdigit(static_cast<UChar32>(c)) != 0; }
bool cp_alpha(char32_t c) { return u_isalpha(static_cast<UChar32>(c)) != 0; }
bool cp_alnum(char32_t c) {
  return cp_alpha(c) || u_isdigit(static_cast<UChar32>(c)) ||
         u_getNumericValue(static_cast<UChar32>(c)) != U_NO_NUMERIC_VALUE;
}
bool cp_space(char32_t c) { return is_py_space(c); }

// Python's islower/isupper: at least one cased character and none of the other case.
Result<Value> str_case_test(const Value& self, CallArgs& args, bool lower) {
  HEARTH_RETURN_IF_ERROR(bind_args(lower ? "islower" : "isupper", args, {}).status());
  const std::string& s = self.as_string();
  bool cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    const auto c = static_cast<UChar32>(utf8_next(s, pos));
    if (u_isUUppercase(c) || u_istitle(c)) {
      if (lower) return Value::boolean(false);
      cased = true;
    } else if (u_isULowercase(c)) {
      if (!lower) return Value::boolean(false);
      cased = true;
    }
  }
  return Value::boolean(cased);
}
Result<Value> str_islower(Interpreter&, const Value& self, CallArgs& args) { return str_case_test(self, args, true); }
Result<Value> str_isupper(Interpreter&, const Value& self, CallArgs& args) { return str_case_test(self, args, false); }

Result<Value> str_affix_remove(const Value& self, CallArgs& args, bool prefix) {
  const std::string_view fn = prefix ? "removeprefix" : "removesuffix";
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"affix"}));
  if (!a[0]) return type_error(fmt::format("{}() takes exactly one argument (0 given)", fn));
  HEARTH_ASSIGN_OR_RETURN(std::string affix, want_string(fn, *a[0]));
  const std::string& s = self.as_string();
  if (affix.size() <= s.size()) {
    if (prefix && s.compare(0, affix.size(), affix) == 0) return Value::string(s.substr(affix.size()));
    if (!prefix && s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::string(s.substr(0, s.size() - affix.size()));
    }
  }
  return self;
}
Result<Value> str_removeprefix(Interpreter&, const Value& self, CallArgs& args) {
  return str_affix_remove(self, args, true);
}
Result<Value> str_removesuffix(Interpreter&, const Value& self, CallArgs& args) {
  return str_affix_remove(self, args, false);
}

// center/ljust/rjust: pad to `width` code points with `fillchar`.
Result<Value> str_pad(Interpreter& interp, const Value& self, CallArgs& args, std::string_view fn, char align) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"width", "fillchar"}));
  if (!a[0]) return type_error(fmt::format("{}() takes at least 1 argument (0 given)", fn));
  HEARTH_ASSIGN_OR_RETURN(int64_t width, want_int(fn, *a[0]));
  std::string fill = " ";
  if (a[1]) {
    HEARTH_ASSIGN_OR_RETURN(fill, want_string(fn, *a[1]));
    if (utf8_length(fill) != 1) return type_error("The fill character must be exactly one character long");
  }
  const std::string& s = self.as_string();
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return self;
  const int64_t margin = width - len;
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(margin) * fill.size() + s.size()));
  int64_t left = 0;
  if (align == '^') {
    left = margin / 2 + (margin & width & 1);
  } else if (align == '>') {
    left = margin;
  }
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < margin - left; ++i) out += fill;
  return Value::string(std::move(out));
}
Result<Value> str_center(Interpreter& i, const Value& self, CallArgs& args) {
  return str_pad(i, self, args, "center", '^');
}
Result<Value> str_ljust(Interpreter& i, const Value& self, CallArgs& args) {
  return str_pad(i, self, args, "ljust", '<');
}
Result<Value> str_rjust(Interpreter& i, const Value& self, CallArgs& args) {
  return str_pad(i, self, args, "rjust", '>');
}

Result<Value> str_zfill(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("zfill", args, {"width"}));
  if (!a[0]) return type_error("zfill() takes exactly one argument (0 given)");
  HEARTH_ASSIGN_OR_RETURN(int64_t width, want_int("zfill", *a[0]));
  const std::string& s = self.as_string();
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return self;
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(width)));
  const size_t sign = (!s.empty() && (s[0] == '+' || s[0] == '-')) ? 1 : 0;
  return Value::string(s.substr(0, sign) + std::string(static_cast<size_t>(width - len), '0') + s.substr(sign));
}

Result<Value> str_partition_impl(const Value& self, CallArgs& args, bool from_right) {
  const std::string_view fn = from_right ? "rpartition" : "partition";
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"sep"}));
  if (!a[0]) return type_error(fmt::format("{}() takes exactly one argument (0 given)", fn));
  HEARTH_ASSIGN_OR_RETURN(std::string sep, want_string(fn, *a[0]));
  if (sep.empty()) return type_error("empty separator");
  const std::string& s = self.as_string();
  const size_t hit = from_right ? s.rfind(sep) : s.find(sep);
  if (hit == std::string::npos) {
    if (from_right) return Value::tuple({Value::string(""), Value::string(""), self});
    return Value::tuple({self, Value::string(""), Value::string("")});
  }
  return Value::tuple({Value::string(s.substr(0, hit)), Value::string(sep), Value::string(s.substr(hit + sep.size()))});
}
Result<Value> str_partition(Interpreter&, const Value& self, CallArgs& args) {
  return str_partition_impl(self, args, false);
}
Result<Value> str_rpartition(Interpreter&, const Value& self, CallArgs& args) {
  return str_partition_impl(self, args, true);
}

Result<std::string> format_with_spec(Interpreter& interp, const Value& v, std::string_view spec);

// Python's str.format: {} {0} {name}, !r/!s/!a conversions and a format spec.
Result<Value> str_format(Interpreter& interp, const Value& self, CallArgs& args) {
  const std::string& f = self.as_string();
  std::string out;
  size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      return type_error("Single '}' encountered in format string");
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const size_t close = f.find('}', i + 1);
    if (close == std::string::npos) return type_error("Single '{' encountered in format string");
    std::string_view field(f.data() + i + 1, close - i - 1);
    std::string_view spec;
    char conversion = 0;
    if (const size_t colon = field.find(':'); colon != std::string_view::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (const size_t bang = field.find('!'); bang != std::string_view::npos) {
      if (bang + 2 != field.size()) return type_error("expected ':' after conversion specifier");
      conversion = field[bang + 1];
      field = field.substr(0, bang);
    }
    if (field.find_first_of(".[") != std::string_view::npos) {
      return Status(ErrorCode::kUnsupported, "attribute and index lookups in format fields are not supported");
    }
    const Value* value = nullptr;
    if (field.empty()) {
      if (used_manual) return type_error("cannot switch from manual field specification to automatic field numbering");
      used_auto = true;
      if (auto_index >= args.positional.size()) {
        return type_error(fmt::format("Replacement index {} out of range for positional args tuple", auto_index));
      }
      value = &args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
      if (used_auto) return type_error("cannot switch from automatic field numbering to manual field specification");
      used_manual = true;
      const size_t index = field.size() > 6 ? SIZE_MAX : std::stoul(std::string(field));
      if (index >= args.positional.size()) {
        return type_error(fmt::format("Replacement index {} out of range for positional args tuple", field));
      }
      value = &args.positional[index];
    } else {
      for (const auto& [name, kv] : args.keyword) {
        if (name == field) value = &kv;
      }
      if (value == nullptr) return type_error(fmt::format("'{}'", field));
    }
    Value converted = *value;
    if (conversion == 'r' || conversion == 'a') {
      HEARTH_ASSIGN_OR_RETURN(std::string r, value_repr(*value));
      converted = Value::string(std::move(r));
    } else if (conversion == 's') {
      HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(*value));
      converted = Value::string(std::move(s));
    } else if (conversion != 0) {
      return type_error(fmt::format("Unknown conversion specifier {}", conversion));
    }
    HEARTH_ASSIGN_OR_RETURN(std::string piece, format_with_spec(interp, converted, spec));
    out += piece;
    i = close;
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size() / 64 + piece.size()));
  }
  return Value::string(std::move(out));
}

constexpr Method kStrMethods[] = {
    {"strip", str_strip},
    {"lstrip", str_lstrip},
    {"rstrip", str_rstrip},
    {"startswith", str_startswith},
    {"endswith", str_endswith},
    {"split", str_split},
    {"rsplit", str_rsplit},
    {"splitlines", str_splitlines},
    {"upper", str_upper},
    {"lower", str_lower},
    {"casefold", str_lower},
    {"title", str_title},
    {"capitalize", str_capitalize},
    {"replace", str_replace},
    {"find", str_find},
    {"rfind", str_rfind},
    {"index", str_index},
    {"rindex", str_rindex},
    {"count", str_count},
    {"join", str_join},
    {"format", str_format},
    {"isdigit", str_is<cp_digit>},
    {"isdecimal", str_is<cp_digit>},
    {"isnumeric", str_is<cp_alnum>},
    {"isalpha", str_is<cp_alpha>},
    {"isalnum", str_is<cp_alnum>},
    {"isspace", str_is<cp_space>},
    {"islower", str_islower},
    {"isupper", str_isupper},
    {"removeprefix", str_removeprefix},
    {"removesuffix", str_removesuffix},
    {"center", str_center},
    {"ljust", str_ljust},
    {"rjust", str_rjust},
    {"zfill", str_zfill},
    {"partition", str_partition},
    {"rpartition", str_rpartition},
};

// ---- dict and list methods ------------------------------------------------------------

Result<Value> dict_get(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("get", args, {"key", "default"}));
  if (!a[0]) return type_error("get expected at least 1 argument, got 0");
  if (const Value* v = self.as_dict().find(*a[0])) return *v;
  return a[1] ? *a[1] : Value::none();
}

Result<Value> dict_items(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("items", args, {}).status());
  const auto& entries = self.as_dict().entries;
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(entries.size() * 16));
  std::vector<Value> items;
  items.reserve(entries.size());
  for (const auto& [k, v] : entries) items.push_back(Value::tuple({k, v}));
  return Value::list(std::move(items));
}

Result<Value> dict_keys(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("keys", args, {}).status());
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(self.as_dict().entries.size() * 8));
  std::vector<Value> keys;
  for (const auto& [k, v] : self.as_dict().entries) keys.push_back(k);
  return Value::list(std::move(keys));
}

Result<Value> dict_values(Interpreter& interp, const Value& self, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("values", args, {}).status());
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(self.as_dict().entries.size() * 8));
  std::vector<Value> values;
  for (const auto& [k, v] : self.as_dict().entries) values.push_back(v);
  return Value::list(std::move(values));
}

Result<Value> same_value(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("copy", args, {}).status());
  return self;
}

constexpr Method kDictMethods[] = {
    {"get", dict_get}, {"items", dict_items}, {"keys", dict_keys}, {"values", dict_values}, {"copy", same_value},
};

Result<Value> list_index(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("index", args, {"value"}));
  if (!a[0]) return type_error("index expected 1 argument, got 0");
  const auto& items = self.as_list().items;
  for (size_t i = 0; i < items.size(); ++i) {
    if (values_equal(items[i], *a[0])) return Value::integer(static_cast<int64_t>(i));
  }
  return type_error("value is not in list");
}

Result<Value> list_count(Interpreter&, const Value& self, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("count", args, {"value"}));
  if (!a[0]) return type_error("count() takes exactly one argument (0 given)");
  const auto& items = self.as_list().items;
  return Value::integer(
      std::count_if(items.begin(), items.end(), [&](const Value& v) { return values_equal(v, *a[0]); }));
}

constexpr Method kListMethods[] = {{"index", list_index}, {"count", list_count}, {"copy", same_value}};

constexpr std::string_view kListMutators[] = {"append", "extend", "insert", "pop",
                                              "remove", "clear",  "sort",   "reverse"};
constexpr std::string_view kDictMutators[] = {"update", "pop", "popitem", "setdefault", "clear"};

template <size_t N>
std::optional<Value> bind_method(const Method (&table)[N], const Value& obj, std::string_view name) {
  for (const Method& m : table) {
    if (m.name == name) {
      const MethodFn fn = m.fn;
      return Value::function(std::string(name),
                             [obj, fn](Interpreter& interp, CallArgs& args) { return fn(interp, obj, args); });
    }
  }
  return std::nullopt;
}

template <size_t N>
std::optional<Value> unsafe_if_listed(const std::string_view (&names)[N], const Value& obj, std::string_view name) {
  if (std::find(std::begin(names), std::end(names), name) == std::end(names)) return std::nullopt;
  return Value::undefined(fmt::format(
      "access to attribute '{}' of '{}' object is unsafe: templates cannot modify values", name, obj.type_name()));
}

// ---- formatting helpers ---------------------------------------------------------------

std::string int_digits(uint64_t magnitude, int base, bool upper) {
  if (magnitude == 0) return "0";
  std::string digits;
  const char* alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  while (magnitude > 0) {
    digits += alphabet[magnitude % static_cast<uint64_t>(base)];
    magnitude /= static_cast<uint64_t>(base);
  }
  std::reverse(digits.begin(), digits.end());
  return digits;
}

uint64_t magnitude_of(int64_t v) { return v < 0 ? ~static_cast<uint64_t>(v) + 1 : static_cast<uint64_t>(v); }

// Pads `body` (after `sign`) to `width` code points: left-justified, zero-filled after
// the sign, or right-justified.
std::string pad_field(const std::string& sign, const std::string& body, int64_t width, bool left, bool zero) {
  const auto len = static_cast<int64_t>(utf8_length(sign) + utf8_length(body));
  if (width <= len) return sign + body;
  const auto pad = static_cast<size_t>(width - len);
  if (left) return sign + body + std::string(pad, ' ');
  if (zero) return sign + std::string(pad, '0') + body;
  return std::string(pad, ' ') + sign + body;
}

std::string c_float(double d, char type, int precision, bool alt) {
  char spec[16];
  std::snprintf(spec, sizeof(spec), "%%%s.*%c", alt ? "#" : "", type);
  char buf[512];
  const int n = std::snprintf(buf, sizeof(buf), spec, precision, d);
  if (n < 0) return "";
  if (static_cast<size_t>(n) < sizeof(buf)) return std::string(buf, static_cast<size_t>(n));
  std::string big(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(big.data(), big.size(), spec, precision, d);
  big.resize(static_cast<size_t>(n));
  return big;
}

Result<std::string> format_with_spec(Interpreter& interp, const Value& v, std::string_view spec) {
  if (spec.empty()) return value_to_str(v);
  // [[fill]align][sign][#][0][width][,|_][.precision][type]
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  {
    size_t first_end = 0;
    utf8_next(spec, first_end);
    if (first_end < spec.size() && is_align(spec[first_end])) {
      fill = std::string(spec.substr(0, first_end));
      align = spec[first_end];
      i = first_end + 1;
    } else if (is_align(spec[0])) {
      align = spec[0];
      i = 1;
    }
  }
  char sign = '-';
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool alt = false;
  if (i < spec.size() && spec[i] == '#') {
    alt = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '0') {
    if (align == 0) {
      fill = "0";
      align = '=';
    }
    ++i;
  }
  int64_t width = 0;
  while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
    width = width * 10 + (spec[i++] - '0');
    if (width > 100000) return type_error("format width too large");
  }
  char grouping = 0;
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) grouping = spec[i++];
  int precision = -1;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    precision = 0;
    while (i < spec.size() && spec[i] >= '0' && spec[i] <= '9') {
      precision = precision * 10 + (spec[i++] - '0');
      if (precision > 1000) return type_error("format precision too large");
    }
  }
  char type = 0;
  if (i < spec.size()) type = spec[i++];
  if (i != spec.size()) return type_error("Invalid format specifier");
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(width)));

  std::string sign_text, body;
  bool numeric = false;
  if (v.is_string()) {
    if (type != 0 && type != 's')
      return type_error(fmt::format("Unknown format code '{}' for object of type 'str'", type));
    body = v.as_string();
    if (precision >= 0) {
      const std::vector<size_t> offsets = utf8_offsets(body);
      if (static_cast<size_t>(precision) + 1 < offsets.size()) body.resize(offsets[static_cast<size_t>(precision)]);
    }
  } else if ((v.is_int() && type == 0) || ((v.is_int() || v.is_bool()) && type != 0 &&
                                           std::string_view("dxXobnc").find(type) != std::string_view::npos)) {
    numeric = true;
    const int64_t n = v.to_int();
    if (type == 'c') {
      if (n < 0 || n > 0x10ffff) return type_error("%c arg not in range(0x110000)");
      utf8_append(body, static_cast<char32_t>(n));
    } else {
      const int base = (type == 'x' || type == 'X') ? 16 : type == 'o' ? 8 : type == 'b' ? 2 : 10;
      body = int_digits(magnitude_of(n), base, type == 'X');
      if (grouping != 0 && base == 10) {
        std::string grouped;
        for (size_t k = 0; k < body.size(); ++k) {
          if (k > 0 && (body.size() - k) % 3 == 0) grouped += grouping;
          grouped += body[k];
        }
        body = grouped;
      }
      if (alt && base != 10)
        body = std::string(base == 16 ? (type == 'X' ? "0X" : "0x") : base == 8 ? "0o" : "0b") + body;
      if (n < 0) {
        sign_text = "-";
      } else if (sign == '+' || sign == ' ') {
        sign_text = std::string(1, sign);
      }
    }
  } else if (v.is_number() && (type == 0 || std::string_view("eEfFgG%").find(type) != std::string_view::npos)) {
    numeric = true;
    double d = v.to_double();
    if (type == 0 && precision < 0) {
      body = v.is_float() ? float_repr(std::fabs(d)) : std::to_string(magnitude_of(v.to_int()));
    } else if (type == '%') {
      body = c_float(std::fabs(d) * 100.0, 'f', precision < 0 ? 6 : precision, alt) + "%";
    } else {
      const char t = type == 0 ? 'g' : type;
      body = c_float(std::fabs(d), t, precision < 0 ? 6 : precision, alt);
    }
    if (std::signbit(d) && !std::isnan(d)) {
      sign_text = "-";
    } else if (sign == '+' || sign == ' ') {
      sign_text = std::string(1, sign);
    }
  } else if (type == 0 && !v.is_number()) {
    return type_error(fmt::format("unsupported format string passed to {}.__format__", v.type_name()));
  } else {
    return type_error(fmt::format("Unknown format code '{}' for object of type '{}'", type, v.type_name()));
  }
  if (align == 0) align = numeric ? '>' : '<';
  const auto len = static_cast<int64_t>(utf8_length(sign_text) + utf8_length(body));
  if (width <= len) return sign_text + body;
  const auto pad = static_cast<size_t>(width - len);
  std::string padding;
  for (size_t k = 0; k < pad; ++k) padding += fill;
  switch (align) {
    case '<':
      return sign_text + body + padding;
    case '=':
      return sign_text + padding + body;
    case '^': {
      std::string left_pad, right_pad;
      for (size_t k = 0; k < pad / 2; ++k) left_pad += fill;
      for (size_t k = 0; k < pad - pad / 2; ++k) right_pad += fill;
      return left_pad + sign_text + body + right_pad;
    }
    default:
      return padding + sign_text + body;
  }
}

}  // namespace

std::optional<Value> get_method(const Value& obj, std::string_view name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      return bind_method(kStrMethods, obj, name);
    case Value::Kind::kDict:
      if (auto m = bind_method(kDictMethods, obj, name)) return m;
      return unsafe_if_listed(kDictMutators, obj, name);
    case Value::Kind::kList:
      if (auto m = bind_method(kListMethods, obj, name)) return m;
      return unsafe_if_listed(kListMutators, obj, name);
    default:
      return std::nullopt;
  }
}

std::string py_upper(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    }
    return out;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toUpper(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string py_lower(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    }
    return out;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string py_capitalize(std::string_view s) {
  if (s.empty()) return std::string();
  size_t pos = 0;
  const char32_t first = utf8_next(s, pos);
  std::string out;
  append_title(out, first);
  out += py_lower(s.substr(pos));
  return out;
}

std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    if (prev_cased) {
      out += py_lower(s.substr(start, pos - start));
    } else {
      append_title(out, cp);
    }
    prev_cased = is_cased(cp);
  }
  return out;
}

std::string jinja_title(std::string_view s) {
  // Each piece between (and each run of) separators: first character upper, rest lower.
  auto is_sep = [](char32_t c) {
    return is_py_space(c) || c == U'-' || c == U'(' || c == U'{' || c == U'[' || c == U'<';
  };
  std::string out;
  size_t pos = 0;
  bool piece_start = true;
  bool in_sep = false;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    const bool sep = is_sep(cp);
    if (sep != in_sep) piece_start = true;
    in_sep = sep;
    const std::string_view ch = s.substr(start, pos - start);
    out += piece_start ? py_upper(ch) : py_lower(ch);
    piece_start = false;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars != nullptr) set = code_points(*chars);
  auto strip_it = [&](char32_t cp) {
    if (chars == nullptr) return is_py_space(cp);
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = s.size();
  if (left) {
    size_t pos = 0;
    while (pos < s.size()) {
      size_t next = pos;
      if (!strip_it(utf8_next(s, next))) break;
      pos = next;
    }
    begin = pos;
  }
  if (right) {
    // Walk forward remembering where the last kept code point ended.
    size_t pos = begin, keep = begin;
    while (pos < s.size()) {
      if (!strip_it(utf8_next(s, pos))) keep = pos;
    }
    end = keep;
  }
  return std::string(s.substr(begin, end - begin));
}

Result<std::string> py_replace(Interpreter& interp, std::string_view s, std::string_view old,
                               std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    const size_t n = utf8_length(s) + 1;
    const size_t times = count < 0 ? n : std::min<size_t>(n, static_cast<size_t>(count));
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(s.size() + times * replacement.size()));
    size_t pos = 0, done = 0;
    while (true) {
      if (done < times) {
        out += replacement;
        ++done;
      }
      if (pos >= s.size()) break;
      const size_t start = pos;
      utf8_next(s, pos);
      out.append(s.substr(start, pos - start));
    }
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(replacement);
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size() / 64 + replacement.size()));
    start = hit + old.size();
    ++done;
  }
  out.append(s.substr(start));
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size()));
  return out;
}

std::vector<std::string> py_splitlines(std::string_view s) {
  std::vector<std::string> lines;
  size_t pos = 0, line_start = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    const bool brk = cp == U'\n' || cp == U'\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
                     cp == 0x85 || cp == 0x2028 || cp == 0x2029;
    if (!brk) continue;
    lines.emplace_back(s.substr(line_start, start - line_start));
    if (cp == U'\r' && pos < s.size() && s[pos] == '\n') ++pos;
    line_start = pos;
  }
  if (line_start < s.size()) lines.emplace_back(s.substr(line_start));
  return lines;
}

Result<std::string> percent_format(Interpreter& interp, std::string_view format, const Value& args) {
  std::vector<Value> positional;
  const Value* mapping = args.is_dict() ? &args : nullptr;
  if (args.is_tuple()) {
    positional = args.as_list().items;
  } else {
    positional.push_back(args);
  }
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) return type_error("incomplete format");
    const Value* value = nullptr;
    if (format[i] == '(') {
      if (mapping == nullptr) return type_error("format requires a mapping");
      int depth = 1;
      const size_t key_start = ++i;
      while (i < format.size() && depth > 0) {
        if (format[i] == '(') ++depth;
        if (format[i] == ')') --depth;
        if (depth > 0) ++i;
      }
      if (i >= format.size()) return type_error("incomplete format key");
      const std::string_view key = format.substr(key_start, i - key_start);
      value = mapping->as_dict().find(key);
      if (value == nullptr) return type_error(fmt::format("'{}'", key));
      ++i;
    }
    bool left = false, plus = false, space = false, alt = false, zero = false;
    for (; i < format.size(); ++i) {
      const char c = format[i];
      if (c == '-') {
        left = true;
      } else if (c == '+') {
        plus = true;
      } else if (c == ' ') {
        space = true;
      } else if (c == '#') {
        alt = true;
      } else if (c == '0') {
        zero = true;
      } else {
        break;
      }
    }
    auto take_number = [&](int64_t& out_n) -> Status {
      if (i < format.size() && format[i] == '*') {
        ++i;
        if (next >= positional.size()) return type_error("not enough arguments for format string");
        HEARTH_ASSIGN_OR_RETURN(out_n, want_int("%", positional[next++]));
        return Status::ok();
      }
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') {
        out_n = out_n * 10 + (format[i++] - '0');
        if (out_n > 100000) return type_error("format width or precision too large");
      }
      return Status::ok();
    };
    int64_t width = 0, precision = -1;
    HEARTH_RETURN_IF_ERROR(take_number(width));
    if (width < 0) {
      left = true;
      width = -width;
    }
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = 0;
      HEARTH_RETURN_IF_ERROR(take_number(precision));
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) return type_error("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (value == nullptr) {
      if (next >= positional.size()) return type_error("not enough arguments for format string");
      value = &positional[next++];
    }
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(width)));
    std::string sign, body;
    bool numeric = true;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        numeric = false;
        if (type == 's') {
          HEARTH_ASSIGN_OR_RETURN(body, value_to_str(*value));
        } else {
          HEARTH_ASSIGN_OR_RETURN(body, value_repr(*value));
        }
        if (precision >= 0) {
          const std::vector<size_t> offsets = utf8_offsets(body);
          if (static_cast<size_t>(precision) + 1 < offsets.size()) body.resize(offsets[static_cast<size_t>(precision)]);
        }
        break;
      }
      case 'd':
      case 'i':
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        int64_t n;
        if (value->is_int() || value->is_bool()) {
          n = value->to_int();
        } else if (value->is_float() && (type == 'd' || type == 'i' || type == 'u')) {
          const double d = value->as_float();
          if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return type_error("cannot convert float to integer");
          n = static_cast<int64_t>(d);
        } else {
          return type_error(fmt::format("%{} format: a real number is required, not {}", type, value->type_name()));
        }
        const int base = (type == 'x' || type == 'X') ? 16 : type == 'o' ? 8 : 10;
        body = int_digits(magnitude_of(n), base, type == 'X');
        if (precision > 0 && body.size() < static_cast<size_t>(precision)) {
          body.insert(0, static_cast<size_t>(precision) - body.size(), '0');
        }
        if (alt && base == 16) body.insert(0, type == 'X' ? "0X" : "0x");
        if (alt && base == 8) body.insert(0, "0o");
        sign = n < 0 ? "-" : plus ? "+" : space ? " " : "";
        break;
      }
      case 'e':
      case 'E':
      case 'f':
      case 'F':
      case 'g':
      case 'G': {
        if (!value->is_number()) {
          return type_error(fmt::format("must be real number, not {}", value->type_name()));
        }
        const double d = value->to_double();
        body = c_float(std::fabs(d), type, precision < 0 ? 6 : static_cast<int>(precision), alt);
        sign = (std::signbit(d) && !std::isnan(d)) ? "-" : plus ? "+" : space ? " " : "";
        break;
      }
      case 'c': {
        numeric = false;
        if (value->is_string() && utf8_length(value->as_string()) == 1) {
          body = value->as_string();
        } else if (value->is_int()) {
          if (value->as_int() < 0 || value->as_int() > 0x10ffff) return type_error("%c arg not in range(0x110000)");
          utf8_append(body, static_cast<char32_t>(value->as_int()));
        } else {
          return type_error("%c requires int or char");
        }
        break;
      }
      default:
        return type_error(fmt::format("unsupported format character '{}'", type));
    }
    out += pad_field(sign, body, width, left, zero && numeric);
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size() / 64 + body.size()));
  }
  if (mapping == nullptr && next < positional.size()) {
    return type_error("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace hearth::jinja
