// Jinja filters and tests, and the globals of Hugging Face's chat-template environment.
#include "chat/jinja_builtins.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <unordered_map>

#include "chat/jinja_interpreter.h"

namespace hearth::jinja {
namespace {

using FilterFn = Result<Value> (*)(Interpreter&, const Value&, CallArgs&);
using TestFn = Result<bool> (*)(Interpreter&, const Value&, CallArgs&);

Status type_error(std::string message) { return Status(ErrorCode::kInvalidArgument, std::move(message)); }

Status undefined_error(const Value& v) { return Status(ErrorCode::kInvalidArgument, v.undefined_hint()); }

// Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0, items first.
Result<Value> get_path(Interpreter& interp, const Value& item, std::string_view path) {
  Value cur = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string_view part =
        path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    Value key;
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        part.size() < 18) {
      key = Value::integer(std::strtoll(std::string(part).c_str(), nullptr, 10));
    } else {
      key = Value::string(std::string(part));
    }
    HEARTH_ASSIGN_OR_RETURN(cur, interp.get_item(cur, key));
    if (dot == std::string_view::npos) return cur;
    start = dot + 1;
  }
}

// The `attribute` argument of sort/unique/min/max/sum/join: a path string or an int.
Result<Value> get_attribute_arg(Interpreter& interp, const Value& item, const std::optional<Value>& attribute) {
  if (!attribute || attribute->is_none()) return item;
  if (attribute->is_int()) return interp.get_item(item, *attribute);
  HEARTH_ASSIGN_OR_RETURN(std::string path, want_string("attribute", *attribute));
  return get_path(interp, item, path);
}

Value fold_case(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::string(py_lower(v.as_string()));
  return v;
}

// Sorts `keys` stably (indexes into them); fails like Python on incomparable keys.
Result<std::vector<size_t>> sorted_order(Interpreter& interp, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  HEARTH_RETURN_IF_ERROR(interp.charge(keys.size() * 4));
  Status error;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (!error.is_ok()) return a < b;
    auto c = values_compare(keys[a], keys[b]);
    if (!c.is_ok()) {
      error = c.status();
      return a < b;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.is_ok()) return error;
  return order;
}

// ---- filters --------------------------------------------------------------------------

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("abs", args, {}).status());
  if (v.is_float()) return Value::number(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    const int64_t i = v.to_int();
    if (i == INT64_MIN) return type_error("integer overflow");
    return Value::integer(i < 0 ? -i : i);
  }
  if (v.is_undefined()) return undefined_error(v);
  return type_error(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Result<Value> f_attr(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("attr", args, {"name"}));
  if (!a[0]) return type_error("attr() needs an attribute name");
  HEARTH_ASSIGN_OR_RETURN(std::string name, want_string("attr", *a[0]));
  return interp.get_attr(v, name);
}

Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("capitalize", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(py_capitalize(s));
}

Result<Value> f_center(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("center", args, {"width"}));
  int64_t width = 80;
  if (a[0]) {
    HEARTH_ASSIGN_OR_RETURN(width, want_int("center", *a[0]));
  }
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  const auto len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value::string(std::move(s));
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(width) + s.size()));
  const int64_t margin = width - len;
  const int64_t left = margin / 2 + (margin & width & 1);
  return Value::string(std::string(static_cast<size_t>(left), ' ') + s +
                       std::string(static_cast<size_t>(margin - left), ' '));
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("default", args, {"default_value", "boolean"}));
  const bool boolean = a[1] && a[1]->truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a[0] ? *a[0] : Value::string("");
  return v;
}

Result<Value> f_dictsort(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("dictsort", args, {"case_sensitive", "by", "reverse"}));
  if (!v.is_dict()) return type_error("dictsort needs a mapping");
  const bool case_sensitive = a[0] && a[0]->truthy();
  std::string by = "key";
  if (a[1]) {
    HEARTH_ASSIGN_OR_RETURN(by, want_string("dictsort", *a[1]));
  }
  if (by != "key" && by != "value") return type_error("You can only sort by either \"key\" or \"value\"");
  const auto& entries = v.as_dict().entries;
  std::vector<Value> keys;
  for (const auto& [k, val] : entries) keys.push_back(fold_case(by == "key" ? k : val, case_sensitive));
  HEARTH_ASSIGN_OR_RETURN(std::vector<size_t> order, sorted_order(interp, keys, a[2] && a[2]->truthy()));
  std::vector<Value> out;
  for (size_t i : order) out.push_back(Value::tuple({entries[i].first, entries[i].second}));
  return Value::list(std::move(out));
}

Result<Value> f_escape(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("escape", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size()));
  return Value::string(std::move(out));
}

Result<Value> f_first(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("first", args, {}).status());
  if (v.is_list()) {
    if (v.as_list().items.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.as_list().items.front();
  }
  if (v.is_dict()) {
    if (v.as_dict().entries.empty()) return Value::undefined("No first item, sequence was empty.");
    return v.as_dict().entries.front().first;
  }
  if (v.is_string()) {
    const std::string& s = v.as_string();
    if (s.empty()) return Value::undefined("No first item, sequence was empty.");
    size_t pos = 0;
    utf8_next(s, pos);
    return Value::string(s.substr(0, pos));
  }
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  return Value::undefined("No first item, sequence was empty.");
}

Result<Value> f_last(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("last", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, v.is_list() ? std::vector<Value>() : interp.iterate(v));
  const std::vector<Value>& seq = v.is_list() ? v.as_list().items : items;
  if (seq.empty()) return Value::undefined("No last item, sequence was empty.");
  return seq.back();
}

// Python's float(str): whitespace around, single underscores between digits, inf/nan.
std::optional<double> parse_float(std::string_view text) {
  const std::string s = py_strip(text, nullptr, true, true);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
        std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
      continue;
    }
    cleaned += s[i];
  }
  if (cleaned.empty() || cleaned.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return d;
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("float", args, {"default"}));
  if (v.is_number()) return Value::number(v.to_double());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  }
  return a[0] ? *a[0] : Value::number(0.0);
}

Result<Value> f_format(Interpreter& interp, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return type_error("can't handle positional and keyword arguments at the same time");
  }
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  Value format_args;
  if (!args.keyword.empty()) {
    DictObj d;
    for (auto& [k, val] : args.keyword) d.set(Value::string(k), val);
    format_args = Value::dict(std::move(d));
  } else {
    format_args = Value::tuple(args.positional);
  }
  HEARTH_ASSIGN_OR_RETURN(std::string out, percent_format(interp, s, format_args));
  return Value::string(std::move(out));
}

Result<Value> f_indent(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("indent", args, {"width", "first", "blank"}));
  std::string indentation = "    ";
  if (a[0] && a[0]->is_string()) {
    indentation = a[0]->as_string();
  } else if (a[0]) {
    HEARTH_ASSIGN_OR_RETURN(int64_t width, want_int("indent", *a[0]));
    if (width < 0) width = 0;
    if (static_cast<uint64_t>(width) > 4096) return type_error("indent width too large");
    indentation = std::string(static_cast<size_t>(width), ' ');
  }
  const bool first = a[1] && a[1]->truthy();
  const bool blank = a[2] && a[2]->truthy();
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  s += '\n';  // Jinja's quirk: splitlines() then drops this last (empty) line
  const std::vector<std::string> lines = py_splitlines(s);
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(s.size() + lines.size() * indentation.size()));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
  }
  if (first) out = indentation + out;
  return Value::string(std::move(out));
}

// Python's int(str, base): optional sign, digits with single underscores, whitespace around.
std::optional<int64_t> parse_int(std::string_view text, int64_t base) {
  const std::string s = py_strip(text, nullptr, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  if (i + 1 < s.size() && s[i] == '0') {
    const char p = static_cast<char>(s[i + 1] | 0x20);
    if ((p == 'x' && base == 16) || (p == 'o' && base == 8) || (p == 'b' && base == 2)) i += 2;
  }
  if (i >= s.size()) return std::nullopt;
  int64_t value = 0;
  bool prev_digit = false;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_' && prev_digit && i + 1 < s.size() && s[i + 1] != '_') {
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, d, &value)) return std::nullopt;
    prev_digit = true;
  }
  if (!prev_digit) return std::nullopt;
  return negative ? -value : value;
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("int", args, {"default", "base"}));
  const Value fallback = a[0] ? *a[0] : Value::integer(0);
  int64_t base = 10;
  if (a[1]) {
    HEARTH_ASSIGN_OR_RETURN(base, want_int("int", *a[1]));
  }
  if (base < 2 || base > 36) return type_error("int() base must be >= 2 and <= 36");
  if (v.is_int() || v.is_bool()) return Value::integer(v.to_int());
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    // Jinja's quirk: "42.23"|int is 42.
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d) && std::fabs(*d) < 9.2e18) {
      return Value::integer(static_cast<int64_t>(*d));
    }
  }
  return fallback;
}

Result<Value> f_items(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("items", args, {}).status());
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return type_error("Can only get item pairs from a mapping.");
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(v.as_dict().entries.size() * 16));
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().entries) out.push_back(Value::tuple({k, val}));
  return Value::list(std::move(out));
}

Result<Value> f_join(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("join", args, {"d", "attribute"}));
  std::string sep;
  if (a[0]) {
    HEARTH_ASSIGN_OR_RETURN(sep, value_to_str(*a[0]));
  }
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value item, get_attribute_arg(interp, items[i], a[1]));
    HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(item));
    if (i > 0) out += sep;
    out += s;
    HEARTH_RETURN_IF_ERROR(interp.charge_bytes(out.size() / 64 + s.size() + sep.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("length", args, {}).status());
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Value::integer(0);
    case Value::Kind::kString:
      return Value::integer(static_cast<int64_t>(utf8_length(v.as_string())));
    case Value::Kind::kList:
      return Value::integer(static_cast<int64_t>(v.as_list().items.size()));
    case Value::Kind::kDict:
      return Value::integer(static_cast<int64_t>(v.as_dict().entries.size()));
    default:
      return type_error(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

Result<Value> f_list(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("list", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  return Value::list(std::move(items));
}

Result<Value> f_lower(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("lower", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(py_lower(s));
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("upper", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(py_upper(s));
}

Result<Value> f_title(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("title", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(jinja_title(s));
}

// The filter or test name and its extra arguments out of map/select-style arguments.
struct NamedCall {
  std::string name;
  CallArgs rest;
};

Result<NamedCall> split_named_call(std::string_view fn, const CallArgs& args, size_t name_index) {
  NamedCall call;
  if (args.positional.size() > name_index) {
    HEARTH_ASSIGN_OR_RETURN(call.name, want_string(fn, args.positional[name_index]));
    call.rest.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(name_index) + 1,
                                args.positional.end());
  }
  call.rest.keyword = args.keyword;
  return call;
}

Result<Value> f_map(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  std::vector<Value> out;
  out.reserve(items.size());
  const bool by_attribute =
      args.positional.empty() &&
      std::any_of(args.keyword.begin(), args.keyword.end(), [](const auto& kw) { return kw.first == "attribute"; });
  if (by_attribute) {
    HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("map", args, {"attribute", "default"}));
    for (const Value& item : items) {
      HEARTH_ASSIGN_OR_RETURN(Value mapped, get_attribute_arg(interp, item, a[0]));
      if (mapped.is_undefined() && a[1]) mapped = *a[1];
      out.push_back(std::move(mapped));
    }
    return Value::list(std::move(out));
  }
  HEARTH_ASSIGN_OR_RETURN(NamedCall call, split_named_call("map", args, 0));
  if (call.name.empty()) return type_error("map requires a filter argument");
  if (!has_filter(call.name)) return Status(ErrorCode::kUnsupported, fmt::format("no filter named '{}'", call.name));
  for (const Value& item : items) {
    CallArgs each = call.rest;
    HEARTH_ASSIGN_OR_RETURN(Value mapped, apply_filter(interp, call.name, item, each));
    out.push_back(std::move(mapped));
  }
  return Value::list(std::move(out));
}

Result<Value> select_impl(Interpreter& interp, const Value& v, CallArgs& args, bool by_attr, bool keep) {
  const std::string_view fn = by_attr ? (keep ? "selectattr" : "rejectattr") : (keep ? "select" : "reject");
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) return type_error(fmt::format("{}() needs an attribute name", fn));
    HEARTH_ASSIGN_OR_RETURN(attr, want_string(fn, args.positional[0]));
  }
  HEARTH_ASSIGN_OR_RETURN(NamedCall call, split_named_call(fn, args, by_attr ? 1 : 0));
  if (!call.name.empty() && !has_test(call.name)) {
    return Status(ErrorCode::kUnsupported, fmt::format("no test named '{}'", call.name));
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      HEARTH_ASSIGN_OR_RETURN(subject, get_path(interp, item, attr));
    }
    bool ok;
    if (call.name.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs each = call.rest;
      HEARTH_ASSIGN_OR_RETURN(ok, apply_test(interp, call.name, subject, each));
    }
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_select(Interpreter& i, const Value& v, CallArgs& args) { return select_impl(i, v, args, false, true); }
Result<Value> f_reject(Interpreter& i, const Value& v, CallArgs& args) { return select_impl(i, v, args, false, false); }
Result<Value> f_selectattr(Interpreter& i, const Value& v, CallArgs& args) {
  return select_impl(i, v, args, true, true);
}
Result<Value> f_rejectattr(Interpreter& i, const Value& v, CallArgs& args) {
  return select_impl(i, v, args, true, false);
}

Result<Value> minmax_impl(Interpreter& interp, const Value& v, CallArgs& args, bool want_max) {
  const std::string_view fn = want_max ? "max" : "min";
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(fn, args, {"case_sensitive", "attribute"}));
  const bool case_sensitive = a[0] && a[0]->truthy();
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  HEARTH_ASSIGN_OR_RETURN(Value best_key, get_attribute_arg(interp, items[0], a[1]));
  best_key = fold_case(best_key, case_sensitive);
  for (size_t i = 1; i < items.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(Value key, get_attribute_arg(interp, items[i], a[1]));
    key = fold_case(key, case_sensitive);
    HEARTH_ASSIGN_OR_RETURN(int c, values_compare(key, best_key));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Result<Value> f_max(Interpreter& i, const Value& v, CallArgs& args) { return minmax_impl(i, v, args, true); }
Result<Value> f_min(Interpreter& i, const Value& v, CallArgs& args) { return minmax_impl(i, v, args, false); }

Result<Value> f_replace(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("replace", args, {"old", "new", "count"}));
  if (!a[0] || !a[1]) return type_error("replace() needs the old and new strings");
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  HEARTH_ASSIGN_OR_RETURN(std::string old, value_to_str(*a[0]));
  HEARTH_ASSIGN_OR_RETURN(std::string repl, value_to_str(*a[1]));
  int64_t count = -1;
  if (a[2] && !a[2]->is_none()) {
    HEARTH_ASSIGN_OR_RETURN(count, want_int("replace", *a[2]));
  }
  HEARTH_ASSIGN_OR_RETURN(std::string out, py_replace(interp, s, old, repl, count));
  return Value::string(std::move(out));
}

Result<Value> f_reverse(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("reverse", args, {}).status());
  if (v.is_string()) {
    const std::string& s = v.as_string();
    const std::vector<size_t> offsets = utf8_offsets(s);
    std::string out;
    out.reserve(s.size());
    for (size_t i = offsets.size() - 1; i > 0; --i) out.append(s, offsets[i - 1], offsets[i] - offsets[i - 1]);
    return Value::string(std::move(out));
  }
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("round", args, {"precision", "method"}));
  int64_t precision = 0;
  if (a[0]) {
    HEARTH_ASSIGN_OR_RETURN(precision, want_int("round", *a[0]));
  }
  std::string method = "common";
  if (a[1]) {
    HEARTH_ASSIGN_OR_RETURN(method, want_string("round", *a[1]));
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return type_error("method must be common, ceil or floor");
  }
  if (!v.is_number()) {
    if (v.is_undefined()) return undefined_error(v);
    return type_error(fmt::format("type {} doesn't define __round__ method", v.type_name()));
  }
  if (!v.is_float() && method == "common" && precision >= 0) return Value::integer(v.to_int());
  precision = std::clamp<int64_t>(precision, -308, 308);
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_double() * scale;
  double r;
  if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    r = std::nearbyint(x);  // Python rounds half to even
  }
  return Value::number(r / scale);
}

Result<Value> f_safe(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("safe", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(std::move(s));
}

Result<Value> f_sort(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("sort", args, {"reverse", "case_sensitive", "attribute"}));
  const bool reverse = a[0] && a[0]->truthy();
  const bool case_sensitive = a[1] && a[1]->truthy();
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  std::vector<Value> keys;
  keys.reserve(items.size());
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value key, get_attribute_arg(interp, item, a[2]));
    keys.push_back(fold_case(key, case_sensitive));
  }
  HEARTH_ASSIGN_OR_RETURN(std::vector<size_t> order, sorted_order(interp, keys, reverse));
  std::vector<Value> out;
  out.reserve(items.size());
  for (size_t i : order) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Result<Value> f_string(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("string", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return Value::string(std::move(s));
}

Result<Value> f_sum(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("sum", args, {"attribute", "start"}));
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  Value total = a[1] ? *a[1] : Value::integer(0);
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value x, get_attribute_arg(interp, item, a[0]));
    if (!x.is_number() || !total.is_number()) {
      return type_error(
          fmt::format("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(), x.type_name()));
    }
    if (x.is_float() || total.is_float()) {
      total = Value::number(total.to_double() + x.to_double());
    } else {
      int64_t r;
      if (__builtin_add_overflow(total.to_int(), x.to_int(), &r)) return type_error("integer overflow");
      total = Value::integer(r);
    }
  }
  return total;
}

// Hugging Face's tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), without HTML escaping.
Result<Value> f_tojson(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a,
                          bind_args("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonOptions options;
  options.ensure_ascii = a[0] && a[0]->truthy();
  if (a[1] && !a[1]->is_none()) {
    HEARTH_ASSIGN_OR_RETURN(int64_t indent, want_int("tojson", *a[1]));
    options.indent = static_cast<int>(std::clamp<int64_t>(indent, 0, 64));
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_list() || a[2]->as_list().items.size() != 2 || !a[2]->as_list().items[0].is_string() ||
        !a[2]->as_list().items[1].is_string()) {
      return type_error("tojson separators must be a pair of strings");
    }
    options.item_separator = a[2]->as_list().items[0].as_string();
    options.key_separator = a[2]->as_list().items[1].as_string();
    if (options.item_separator.empty()) options.item_separator = ",";
  }
  options.sort_keys = a[3] && a[3]->truthy();
  HEARTH_ASSIGN_OR_RETURN(std::string json, value_to_json(v, options));
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(json.size()));
  return Value::string(std::move(json));
}

Result<Value> f_trim(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("trim", args, {"chars"}));
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  if (a[0] && !a[0]->is_none()) {
    HEARTH_ASSIGN_OR_RETURN(std::string chars, want_string("trim", *a[0]));
    return Value::string(py_strip(s, &chars, true, true));
  }
  return Value::string(py_strip(s, nullptr, true, true));
}

Result<Value> f_unique(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("unique", args, {"case_sensitive", "attribute"}));
  const bool case_sensitive = a[0] && a[0]->truthy();
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(v));
  HEARTH_RETURN_IF_ERROR(interp.charge(items.size() * items.size() / 64));
  std::vector<Value> out, seen;
  for (const Value& item : items) {
    HEARTH_ASSIGN_OR_RETURN(Value key, get_attribute_arg(interp, item, a[1]));
    key = fold_case(key, case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(bind_args("wordcount", args, {}).status());
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  int64_t words = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < s.size()) {
    const auto cp = static_cast<UChar32>(utf8_next(s, pos));
    const bool word_char = cp == '_' || u_isalnum(cp);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::integer(words);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> kFilters = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"center", f_center},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
      {"wordcount", f_wordcount},
  };
  return kFilters;
}

// ---- tests ----------------------------------------------------------------------------

Result<Value> one_arg(std::string_view test, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args(test, args, {"other"}));
  if (!a[0]) return type_error(fmt::format("test '{}' needs an argument", test));
  return *a[0];
}

Status no_args(std::string_view test, CallArgs& args) { return bind_args(test, args, {}).status(); }

#define HEARTH_JINJA_SIMPLE_TEST(fn, name, expr)                  \
  Result<bool> fn(Interpreter&, const Value& v, CallArgs& args) { \
    HEARTH_RETURN_IF_ERROR(no_args(name, args));                  \
    return (expr);                                                \
  }

HEARTH_JINJA_SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
HEARTH_JINJA_SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
HEARTH_JINJA_SIMPLE_TEST(t_none, "none", v.is_none())
HEARTH_JINJA_SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
HEARTH_JINJA_SIMPLE_TEST(t_true, "true", v.is_bool() && v.as_bool())
HEARTH_JINJA_SIMPLE_TEST(t_false, "false", v.is_bool() && !v.as_bool())
HEARTH_JINJA_SIMPLE_TEST(t_integer, "integer", v.is_int())
HEARTH_JINJA_SIMPLE_TEST(t_float, "float", v.is_float())
HEARTH_JINJA_SIMPLE_TEST(t_number, "number", v.is_number())
HEARTH_JINJA_SIMPLE_TEST(t_string, "string", v.is_string())
HEARTH_JINJA_SIMPLE_TEST(t_mapping, "mapping", v.is_dict())
HEARTH_JINJA_SIMPLE_TEST(t_iterable, "iterable", v.is_list() || v.is_dict() || v.is_string() || v.is_undefined())
HEARTH_JINJA_SIMPLE_TEST(t_sequence, "sequence", v.is_list() || v.is_dict() || v.is_string() || v.is_undefined())
HEARTH_JINJA_SIMPLE_TEST(t_callable, "callable", v.is_function())

#undef HEARTH_JINJA_SIMPLE_TEST

// Nothing is markup-escaped: the environment does not autoescape.
Result<bool> t_escaped(Interpreter&, const Value&, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(no_args("escaped", args));
  return false;
}

// Jinja2's odd/even: value % 2 == 1 (or 0), with Python's modulo, so floats count too.
Result<bool> parity(const Value& v, CallArgs& args, std::string_view name, int64_t want) {
  HEARTH_RETURN_IF_ERROR(no_args(name, args));
  if (v.is_float()) {
    double r = std::fmod(v.as_float(), 2.0);
    if (r < 0) r += 2.0;
    return r == static_cast<double>(want);
  }
  if (!v.is_int() && !v.is_bool()) {
    if (v.is_undefined()) return undefined_error(v);
    return type_error(fmt::format("test '{}' needs a number, not {}", name, v.type_name()));
  }
  return (v.to_int() % 2 + 2) % 2 == want;
}
Result<bool> t_odd(Interpreter&, const Value& v, CallArgs& args) { return parity(v, args, "odd", 1); }
Result<bool> t_even(Interpreter&, const Value& v, CallArgs& args) { return parity(v, args, "even", 0); }

Result<bool> t_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Value other, one_arg("divisibleby", args));
  HEARTH_ASSIGN_OR_RETURN(int64_t n, want_int("divisibleby", other));
  HEARTH_ASSIGN_OR_RETURN(int64_t x, want_int("divisibleby", v));
  if (n == 0) return type_error("integer division or modulo by zero");
  if (n == -1) return true;
  return x % n == 0;
}

Result<bool> t_eq(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Value other, one_arg("eq", args));
  return values_equal(v, other);
}
Result<bool> t_ne(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Value other, one_arg("ne", args));
  return !values_equal(v, other);
}

Result<bool> order_test(const Value& v, CallArgs& args, std::string_view name, bool (*pred)(int)) {
  HEARTH_ASSIGN_OR_RETURN(Value other, one_arg(name, args));
  HEARTH_ASSIGN_OR_RETURN(int c, values_compare(v, other));
  return pred(c);
}
Result<bool> t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return order_test(v, a, "lt", [](int c) { return c < 0; });
}
Result<bool> t_le(Interpreter&, const Value& v, CallArgs& a) {
  return order_test(v, a, "le", [](int c) { return c <= 0; });
}
Result<bool> t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return order_test(v, a, "gt", [](int c) { return c > 0; });
}
Result<bool> t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return order_test(v, a, "ge", [](int c) { return c >= 0; });
}

Result<bool> t_in(Interpreter& interp, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Value seq, one_arg("in", args));
  if (seq.is_string()) {
    if (!v.is_string()) return type_error("'in <string>' requires string as left operand");
    return seq.as_string().find(v.as_string()) != std::string::npos;
  }
  if (seq.is_dict()) return seq.as_dict().find(v) != nullptr;
  HEARTH_ASSIGN_OR_RETURN(std::vector<Value> items, interp.iterate(seq));
  return std::any_of(items.begin(), items.end(), [&](const Value& item) { return values_equal(item, v); });
}

Result<bool> t_lower(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(no_args("lower", args));
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return py_lower(s) == s && py_upper(s) != s;
}

Result<bool> t_upper(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(no_args("upper", args));
  HEARTH_ASSIGN_OR_RETURN(std::string s, value_to_str(v));
  return py_upper(s) == s && py_lower(s) != s;
}

Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(Value other, one_arg("sameas", args));
  if (v.is_none() || v.is_bool() || v.is_undefined()) return v.kind() == other.kind() && values_equal(v, other);
  if (v.is_namespace() || v.is_function()) return v.same_object(other);
  return false;
}

Result<bool> t_filter(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(no_args("filter", args));
  return v.is_string() && has_filter(v.as_string());
}

Result<bool> t_test(Interpreter&, const Value& v, CallArgs& args) {
  HEARTH_RETURN_IF_ERROR(no_args("test", args));
  return v.is_string() && has_test(v.as_string());
}

const std::unordered_map<std::string_view, TestFn>& tests() {
  static const std::unordered_map<std::string_view, TestFn> kTests = {
      {"defined", t_defined},
      {"undefined", t_undefined},
      {"none", t_none},
      {"boolean", t_boolean},
      {"true", t_true},
      {"false", t_false},
      {"integer", t_integer},
      {"float", t_float},
      {"number", t_number},
      {"string", t_string},
      {"mapping", t_mapping},
      {"iterable", t_iterable},
      {"sequence", t_sequence},
      {"callable", t_callable},
      {"escaped", t_escaped},
      {"odd", t_odd},
      {"even", t_even},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"==", t_eq},
      {"ne", t_ne},
      {"!=", t_ne},
      {"lt", t_lt},
      {"lessthan", t_lt},
      {"<", t_lt},
      {"le", t_le},
      {"<=", t_le},
      {"gt", t_gt},
      {"greaterthan", t_gt},
      {">", t_gt},
      {"ge", t_ge},
      {">=", t_ge},
      {"in", t_in},
      {"lower", t_lower},
      {"upper", t_upper},
      {"sameas", t_sameas},
      {"filter", t_filter},
      {"test", t_test},
  };
  return kTests;
}

// ---- globals --------------------------------------------------------------------------

Result<Value> g_range(Interpreter& interp, CallArgs& args) {
  if (!args.keyword.empty()) return type_error("range() takes no keyword arguments");
  if (args.positional.empty() || args.positional.size() > 3) {
    return type_error(fmt::format("range expected 1 to 3 arguments, got {}", args.positional.size()));
  }
  int64_t bounds[3] = {0, 0, 1};
  for (size_t i = 0; i < args.positional.size(); ++i) {
    HEARTH_ASSIGN_OR_RETURN(bounds[i], want_int("range", args.positional[i]));
  }
  int64_t start = 0, stop = bounds[0], step = 1;
  if (args.positional.size() >= 2) {
    start = bounds[0];
    stop = bounds[1];
  }
  if (args.positional.size() == 3) step = bounds[2];
  if (step == 0) return type_error("range() arg 3 must not be zero");
  // Count in unsigned arithmetic: the bounds may be anywhere in int64.
  uint64_t count = 0;
  if (step > 0 && stop > start) {
    const uint64_t span = static_cast<uint64_t>(stop) - static_cast<uint64_t>(start);
    count = (span - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    const uint64_t span = static_cast<uint64_t>(start) - static_cast<uint64_t>(stop);
    const uint64_t magnitude = step == INT64_MIN ? (uint64_t{1} << 63) : static_cast<uint64_t>(-step);
    count = (span - 1) / magnitude + 1;
  }
  if (count > static_cast<uint64_t>(kMaxRange)) {
    return type_error(fmt::format("range too big: the sandbox allows at most {} items", kMaxRange));
  }
  HEARTH_RETURN_IF_ERROR(interp.charge_bytes(static_cast<size_t>(count) * 8));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.push_back(Value::integer(start + i * step));
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs?, **kwargs) into `out`.
Status fill_dict(Interpreter& interp, std::string_view fn, CallArgs& args, DictObj& out) {
  if (args.positional.size() > 1) return type_error(fmt::format("{} expected at most 1 argument", fn));
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (init.is_dict()) {
      for (const auto& [k, v] : init.as_dict().entries) out.set(k, v);
    } else if (init.is_namespace()) {
      for (const auto& [k, v] : init.as_namespace().attrs.entries) out.set(k, v);
    } else {
      HEARTH_ASSIGN_OR_RETURN(std::vector<Value> pairs, interp.iterate(init));
      for (const Value& pair : pairs) {
        if (!pair.is_list() || pair.as_list().items.size() != 2) {
          return type_error(fmt::format("{} needs a mapping or a sequence of pairs", fn));
        }
        out.set(pair.as_list().items[0], pair.as_list().items[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) out.set(Value::string(k), v);
  return Status::ok();
}

Result<Value> g_dict(Interpreter& interp, CallArgs& args) {
  DictObj d;
  HEARTH_RETURN_IF_ERROR(fill_dict(interp, "dict", args, d));
  return Value::dict(std::move(d));
}

Result<Value> g_namespace(Interpreter& interp, CallArgs& args) {
  Value ns = interp.make_namespace();
  HEARTH_RETURN_IF_ERROR(fill_dict(interp, "namespace", args, ns.as_namespace().attrs));
  return ns;
}

Result<Value> g_raise_exception(Interpreter& interp, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("raise_exception", args, {"message"}));
  std::string message;
  if (a[0]) {
    HEARTH_ASSIGN_OR_RETURN(message, value_to_str(*a[0]));
  }
  return interp.raise(std::move(message));
}

Result<Value> g_strftime_now(Interpreter&, CallArgs& args) {
  HEARTH_ASSIGN_OR_RETURN(BoundArgs a, bind_args("strftime_now", args, {"format"}));
  if (!a[0]) return type_error("strftime_now() needs a format");
  HEARTH_ASSIGN_OR_RETURN(std::string format, want_string("strftime_now", *a[0]));
  if (format.size() > 256) return type_error("strftime_now() format longer than 256 bytes");
  if (format.find('\0') != std::string::npos) return type_error("strftime_now() format holds a NUL");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buf(4096, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
  if (n == 0 && !format.empty()) return type_error("strftime_now() result too long or empty");
  buf.resize(n);
  return Value::string(std::move(buf));
}

const std::unordered_map<std::string_view, Value>& globals() {
  static const std::unordered_map<std::string_view, Value> kGlobals = {
      {"range", Value::function("range", g_range)},
      {"dict", Value::function("dict", g_dict)},
      {"namespace", Value::function("namespace", g_namespace)},
      {"raise_exception", Value::function("raise_exception", g_raise_exception)},
      {"strftime_now", Value::function("strftime_now", g_strftime_now)},
  };
  return kGlobals;
}

}  // namespace

Result<BoundArgs> bind_args(std::string_view fn, CallArgs& args, std::initializer_list<std::string_view> names) {
  BoundArgs bound(names.size());
  if (args.positional.size() > names.size()) {
    return type_error(fmt::format("{}() takes at most {} argument{} ({} given)", fn, names.size(),
                                  names.size() == 1 ? "" : "s", args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) bound[i] = args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end()) return type_error(fmt::format("{}() got an unexpected keyword argument '{}'", fn, name));
    const auto i = static_cast<size_t>(it - names.begin());
    if (bound[i]) return type_error(fmt::format("{}() got multiple values for argument '{}'", fn, name));
    bound[i] = value;
  }
  return bound;
}

Result<std::string> want_string(std::string_view fn, const Value& value) {
  if (value.is_string()) return value.as_string();
  if (value.is_undefined()) return undefined_error(value);
  return type_error(fmt::format("{}() argument must be str, not {}", fn, value.type_name()));
}

Result<int64_t> want_int(std::string_view fn, const Value& value) {
  if (value.is_int() || value.is_bool()) return value.to_int();
  if (value.is_undefined()) return undefined_error(value);
  return type_error(fmt::format("{}() argument must be an integer, not {}", fn, value.type_name()));
}

bool has_filter(std::string_view name) { return filters().count(name) > 0; }
bool has_test(std::string_view name) { return tests().count(name) > 0; }

Result<Value> apply_filter(Interpreter& interp, std::string_view name, const Value& subject, CallArgs& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) return Status(ErrorCode::kUnsupported, fmt::format("no filter named '{}'", name));
  return it->second(interp, subject, args);
}

Result<bool> apply_test(Interpreter& interp, std::string_view name, const Value& subject, CallArgs& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) return Status(ErrorCode::kUnsupported, fmt::format("no test named '{}'", name));
  return it->second(interp, subject, args);
}

Value get_global(std::string_view name) {
  const auto it = globals().find(name);
  return it == globals().end() ? Value() : it->second;
}

Result<SliceRange> slice_range(size_t length, const SliceSpec& spec) {
  if (spec.step == 0) return type_error("slice step cannot be zero");
  if (spec.step == INT64_MIN) return type_error("slice step out of range");
  const auto n = static_cast<int64_t>(length);
  const int64_t step = spec.step;
  auto adjust = [&](bool has, int64_t v, int64_t fallback) {
    if (!has) return fallback;
    if (v < 0) {
      v += n;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= n) {
      v = step < 0 ? n - 1 : n;
    }
    return v;
  };
  const int64_t start = adjust(spec.has_start, spec.start, step < 0 ? n - 1 : 0);
  const int64_t stop = adjust(spec.has_stop, spec.stop, step < 0 ? -1 : n);
  SliceRange range;
  range.start = start;
  range.step = step;
  if (step > 0) {
    range.count = stop > start ? static_cast<size_t>((stop - start - 1) / step + 1) : 0;
  } else {
    range.count = start > stop ? static_cast<size_t>((start - stop - 1) / (-step) + 1) : 0;
  }
  return range;
}

}  // namespace hearth::jinja
