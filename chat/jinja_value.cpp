#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace hearth::jinja {
namespace {

int max_child_depth(const std::vector<Value>& items) {
  int depth = 0;
  for (const Value& v : items) depth = std::max(depth, v.depth());
  return depth;
}

Status depth_error() {
  return make_error(ErrorCode::kInvalidArgument, "value nested more than {} levels deep", kMaxValueDepth);
}

Result<Value> from_json_at(const boost::json::value& json, int depth) {
  if (depth > kMaxValueDepth) return depth_error();
  switch (json.kind()) {
    case boost::json::kind::null:
      return Value::none();
    case boost::json::kind::bool_:
      return Value::boolean(json.get_bool());
    case boost::json::kind::int64:
      return Value::integer(json.get_int64());
    case boost::json::kind::uint64: {
      const uint64_t u = json.get_uint64();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value::integer(static_cast<int64_t>(u));
      return Value::number(static_cast<double>(u));
    }
    case boost::json::kind::double_:
      return Value::number(json.get_double());
    case boost::json::kind::string:
      return Value::string(std::string(json.get_string()));
    case boost::json::kind::array: {
      std::vector<Value> items;
      items.reserve(json.get_array().size());
      for (const auto& item : json.get_array()) {
        HEARTH_ASSIGN_OR_RETURN(Value v, from_json_at(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case boost::json::kind::object: {
      DictObj d;
      d.entries.reserve(json.get_object().size());
      for (const auto& kv : json.get_object()) {
        HEARTH_ASSIGN_OR_RETURN(Value v, from_json_at(kv.value(), depth + 1));
        d.entries.emplace_back(Value::string(std::string(kv.key())), std::move(v));
      }
      return Value::dict(std::move(d));
    }
  }
  return Value::none();
}

// Python's repr() of a str: single quotes unless the text holds ' and no ".
void append_str_repr(std::string& out, std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += quote;
}

Status repr_into(std::string& out, const Value& v, int depth);

Status str_into(std::string& out, const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return Status::ok();
    case Value::Kind::kString:
      out += v.as_string();
      return Status::ok();
    default:
      return repr_into(out, v, depth);
  }
}

Status repr_into(std::string& out, const Value& v, int depth) {
  if (depth > kMaxValueDepth) return depth_error();
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      out += "Undefined";
      break;
    case Value::Kind::kNone:
      out += "None";
      break;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      break;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      break;
    case Value::Kind::kFloat:
      out += float_repr(v.as_float());
      break;
    case Value::Kind::kString:
      append_str_repr(out, v.as_string());
      break;
    case Value::Kind::kList: {
      const ListObj& l = v.as_list();
      out += l.is_tuple ? '(' : '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i > 0) out += ", ";
        HEARTH_RETURN_IF_ERROR(repr_into(out, l.items[i], depth + 1));
      }
      if (l.is_tuple && l.items.size() == 1) out += ',';
      out += l.is_tuple ? ')' : ']';
      break;
    }
    case Value::Kind::kDict: {
      out += '{';
      bool first = true;
      for (const auto& [key, value] : v.as_dict().entries) {
        if (!first) out += ", ";
        first = false;
        HEARTH_RETURN_IF_ERROR(repr_into(out, key, depth + 1));
        out += ": ";
        HEARTH_RETURN_IF_ERROR(repr_into(out, value, depth + 1));
      }
      out += '}';
      break;
    }
    case Value::Kind::kNamespace: {
      out += "<Namespace ";
      HEARTH_RETURN_IF_ERROR(repr_into(out, Value::dict(v.as_namespace().attrs), depth + 1));
      out += '>';
      break;
    }
    case Value::Kind::kFunction:
      out += "<function " + v.as_function().name + ">";
      break;
  }
  return Status::ok();
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t start = pos;
    const char32_t cp = utf8_next(s, pos);
    switch (cp) {
      case U'"':
        out += "\\\"";
        continue;
      case U'\\':
        out += "\\\\";
        continue;
      case U'\n':
        out += "\\n";
        continue;
      case U'\r':
        out += "\\r";
        continue;
      case U'\t':
        out += "\\t";
        continue;
      case U'\b':
        out += "\\b";
        continue;
      case U'\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    char buf[16];
    if (cp < 0x20 || (ensure_ascii && cp >= 0x7f)) {
      if (cp >= 0x10000) {
        const char32_t c = cp - 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 + (c >> 10)),
                      static_cast<unsigned>(0xdc00 + (c & 0x3ff)));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
    } else {
      out.append(s.substr(start, pos - start));
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

void json_newline(std::string& out, const JsonOptions& options, int level) {
  out += '\n';
  out.append(static_cast<size_t>(options.indent) * static_cast<size_t>(level), ' ');
}

// A dict key as json.dumps writes it: strings as they are, scalars converted.
Result<std::string> json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString:
      return key.as_string();
    case Value::Kind::kInt:
      return std::to_string(key.as_int());
    case Value::Kind::kFloat:
      return json_float(key.as_float());
    case Value::Kind::kBool:
      return std::string(key.as_bool() ? "true" : "false");
    case Value::Kind::kNone:
      return std::string("null");
    default:
      return make_error(ErrorCode::kInvalidArgument, "keys must be str, int, float, bool or None, not {}",
                        key.type_name());
  }
}

Status json_into(std::string& out, const Value& v, const JsonOptions& options, int level) {
  if (level > kMaxValueDepth) return depth_error();
  const std::string& item_sep = options.item_separator.empty()
                                    ? (options.indent >= 0 ? std::string(",") : std::string(", "))
                                    : options.item_separator;
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::ok();
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return Status::ok();
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return Status::ok();
    case Value::Kind::kFloat:
      out += json_float(v.as_float());
      return Status::ok();
    case Value::Kind::kString:
      append_json_string(out, v.as_string(), options.ensure_ascii);
      return Status::ok();
    case Value::Kind::kList: {
      const auto& items = v.as_list().items;
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (options.indent >= 0) json_newline(out, options, level + 1);
        HEARTH_RETURN_IF_ERROR(json_into(out, items[i], options, level + 1));
      }
      if (options.indent >= 0) json_newline(out, options, level);
      out += ']';
      return Status::ok();
    }
    case Value::Kind::kDict: {
      const auto& entries = v.as_dict().entries;
      if (entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<std::pair<std::string, const Value*>> keyed;
      keyed.reserve(entries.size());
      for (const auto& [key, value] : entries) {
        HEARTH_ASSIGN_OR_RETURN(std::string k, json_key(key));
        keyed.emplace_back(std::move(k), &value);
      }
      if (options.sort_keys) {
        std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < keyed.size(); ++i) {
        if (i > 0) out += item_sep;
        if (options.indent >= 0) json_newline(out, options, level + 1);
        append_json_string(out, keyed[i].first, options.ensure_ascii);
        out += options.key_separator;
        HEARTH_RETURN_IF_ERROR(json_into(out, *keyed[i].second, options, level + 1));
      }
      if (options.indent >= 0) json_newline(out, options, level);
      out += '}';
      return Status::ok();
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      break;
  }
  return make_error(ErrorCode::kInvalidArgument, "Object of type {} is not JSON serializable", v.type_name());
}


}  // namespace

const Value* DictObj::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictObj::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void DictObj::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (values_equal(k, key)) {
      depth = std::max(depth, value.depth() + 1);
      v = std::move(value);
      return;
    }
  }
  depth = std::max({depth, key.depth() + 1, value.depth() + 1});
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string hint) {
  Value v;
  v.v_ = Undef{std::make_shared<const std::string>(std::move(hint))};
  return v;
}

Value Value::none() {
  Value v;
  v.v_ = std::monostate{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.v_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.v_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.v_ = d;
  return v;
}

Value Value::string(std::string s) {
  Value v;
  v.v_ = StrPtr(std::make_shared<const std::string>(std::move(s)));
  return v;
}

Value Value::list(std::vector<Value> items) {
  auto obj = std::make_shared<ListObj>();
  obj->depth = 1 + max_child_depth(items);
  obj->items = std::move(items);
  Value v;
  v.v_ = ListPtr(std::move(obj));
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  auto obj = std::make_shared<ListObj>();
  obj->depth = 1 + max_child_depth(items);
  obj->items = std::move(items);
  obj->is_tuple = true;
  Value v;
  v.v_ = ListPtr(std::move(obj));
  return v;
}

Value Value::dict(DictObj d) {
  int depth = 0;
  for (const auto& [k, val] : d.entries) depth = std::max({depth, k.depth(), val.depth()});
  d.depth = depth + 1;
  Value v;
  v.v_ = std::make_shared<const DictObj>(std::move(d));
  return v;
}

Value Value::new_namespace() {
  Value v;
  v.v_ = std::make_shared<NamespaceObj>();
  return v;
}

Value Value::function(std::string name, FunctionObj::Fn fn) {
  Value v;
  v.v_ = std::make_shared<const FunctionObj>(FunctionObj{std::move(name), std::move(fn)});
  return v;
}

Result<Value> Value::from_json(const boost::json::value& json) { return from_json_at(json, 1); }

std::string Value::undefined_hint() const {
  const auto& hint = std::get<Undef>(v_).hint;
  if (hint == nullptr || hint->empty()) return "value is undefined";
  return *hint;
}

double Value::to_double() const {
  switch (kind()) {
    case Kind::kBool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(as_int());
    case Kind::kFloat:
      return as_float();
    default:
      return 0.0;
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().items.empty();
    case Kind::kDict:
      return !as_dict().entries.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

int Value::depth() const {
  switch (kind()) {
    case Kind::kList:
      return as_list().depth;
    case Kind::kDict:
      return as_dict().depth;
    case Kind::kNamespace:
      return 1;
    default:
      return 0;
  }
}

std::string_view Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  if (is_namespace()) return std::get<NsPtr>(v_) == std::get<NsPtr>(other.v_);
  if (is_function()) return std::get<FnPtr>(v_) == std::get<FnPtr>(other.v_);
  return false;
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    return a.to_int() == b.to_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListObj& x = a.as_list();
      const ListObj& y = b.as_list();
      if (&x == &y) return true;
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictObj& x = a.as_dict();
      const DictObj& y = b.as_dict();
      if (&x == &y) return true;
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x.entries) {
        const Value* other = y.find(key);
        if (other == nullptr || !values_equal(value, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
    case Value::Kind::kFunction:
      return a.same_object(b);
    default:
      return false;
  }
}

Result<int> values_compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : (y < x ? 1 : 0);
    }
    const int64_t x = a.to_int(), y = b.to_int();
    return x < y ? -1 : (y < x ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return values_compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) return Status(ErrorCode::kInvalidArgument, a.undefined_hint());
  if (b.is_undefined()) return Status(ErrorCode::kInvalidArgument, b.undefined_hint());
  return make_error(ErrorCode::kInvalidArgument, "'<' not supported between instances of '{}' and '{}'", a.type_name(),
                    b.type_name());
}

Result<std::string> value_to_str(const Value& v) {
  if (v.is_string()) return v.as_string();
  std::string out;
  HEARTH_RETURN_IF_ERROR(str_into(out, v, 0));
  return out;
}

Result<std::string> value_repr(const Value& v) {
  std::string out;
  HEARTH_RETURN_IF_ERROR(repr_into(out, v, 0));
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0.0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits, then laid out the way Python's repr does.
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[0] == '-') {
    out += '-';
    i = 1;
  }
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (size_t k = i; k < e_pos; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exp = std::stoi(sci.substr(e_pos + 1));
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    } else {
      const size_t int_digits = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_digits) {
        out += digits;
        out.append(int_digits - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_digits);
        out += '.';
        out += digits.substr(int_digits);
      }
    }
    return out;
  }
  out += digits[0];
  if (digits.size() > 1) {
    out += '.';
    out += digits.substr(1);
  }
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  out += ebuf;
  return out;
}

Result<std::string> value_to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  HEARTH_RETURN_IF_ERROR(json_into(out, v, options, 0));
  return out;
}

bool is_py_space(char32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x1f);
  return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

}  // namespace hearth::jinja
