// For tests of structured output: a seeded generator of random JSON schemas (the keywords
// grammar/json_schema.h supports) and a validator that checks a JSON value against one.
// The validator is written from the JSON Schema spec, independently of the grammar
// compiler, so that a compiler bug shows up as an invalid output.
#pragma once

#include <cmath>
#include <random>
#include <regex>
#include <set>
#include <string>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace hearth::testing {

namespace json_check {

namespace json = boost::json;

inline size_t code_points(std::string_view s) {
  size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

inline bool is_whole(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return true;
  return v.is_double() && v.as_double() == std::floor(v.as_double());
}

inline bool full_regex(std::string_view s, const char* re) { return std::regex_match(std::string(s), std::regex(re)); }

inline bool format_ok(std::string_view s, std::string_view f) {
  if (f == "date") return full_regex(s, R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))");
  if (f == "time") return full_regex(s, R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))");
  if (f == "date-time") {
    const auto t = s.find('T');
    return t != std::string_view::npos && format_ok(s.substr(0, t), "date") && format_ok(s.substr(t + 1), "time");
  }
  if (f == "uuid") return full_regex(s, R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})");
  if (f == "email") return full_regex(s, R"([A-Za-z0-9_+\-]+(\.[A-Za-z0-9_+\-]+)*@([A-Za-z0-9]([A-Za-z0-9\-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,})");
  if (f == "ipv4") return full_regex(s, R"(((25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]\d|\d))");
  return false;
}

// Why `v` is not valid against `schema` ("" when it is). `root` resolves $ref.
inline std::string why_invalid(const json::value& v, const json::value& schema, const json::value& root,
                               const std::string& at = "$") {
  if (schema.is_bool()) return schema.as_bool() ? "" : at + ": schema false";
  const json::object& s = schema.as_object();
  if (const auto* n = s.if_contains("nullable"); n && n->as_bool() && v.is_null()) return "";
  if (const auto* r = s.if_contains("$ref")) {
    std::string ref(r->as_string());
    const json::value* target = &root;
    boost::system::error_code ec;
    if (ref != "#") target = root.find_pointer(ref.substr(1), ec);
    if (target == nullptr) return at + ": bad $ref " + ref;
    return why_invalid(v, *target, root, at);
  }
  if (const auto* t = s.if_contains("type")) {
    std::vector<std::string> types;
    if (t->is_string()) types.emplace_back(t->as_string());
    for (const auto& x : t->is_array() ? t->as_array() : json::array()) types.emplace_back(x.as_string());
    bool any = false;
    for (const std::string& ty : types) {
      any |= (ty == "string" && v.is_string()) || (ty == "integer" && v.is_number() && is_whole(v)) ||
             (ty == "number" && v.is_number()) || (ty == "boolean" && v.is_bool()) || (ty == "null" && v.is_null()) ||
             (ty == "object" && v.is_object()) || (ty == "array" && v.is_array());
    }
    if (!any) return at + ": wrong type for " + json::serialize(*t);
  }
  if (const auto* c = s.if_contains("const"); c && *c != v) return at + ": not the const";
  if (const auto* e = s.if_contains("enum")) {
    bool found = false;
    for (const auto& x : e->as_array()) found |= x == v;
    if (!found) return at + ": not in the enum";
  }
  if (const auto* a = s.if_contains("anyOf")) {
    bool ok = false;
    for (const auto& x : a->as_array()) ok |= why_invalid(v, x, root, at).empty();
    if (!ok) return at + ": matches no anyOf branch";
  }
  if (const auto* o = s.if_contains("oneOf")) {
    int n = 0;
    for (const auto& x : o->as_array()) n += why_invalid(v, x, root, at).empty();
    if (n != 1) return fmt::format("{}: matches {} oneOf branches", at, n);
  }
  if (const auto* a = s.if_contains("allOf")) {
    for (const auto& x : a->as_array()) {
      if (auto w = why_invalid(v, x, root, at); !w.empty()) return w;
    }
  }
  if (v.is_string()) {
    const std::string_view str(v.as_string().data(), v.as_string().size());
    const size_t n = code_points(str);
    if (const auto* m = s.if_contains("minLength"); m && n < m->to_number<size_t>()) return at + ": too short";
    if (const auto* m = s.if_contains("maxLength"); m && n > m->to_number<size_t>()) return at + ": too long";
    if (const auto* p = s.if_contains("pattern");
        p && !std::regex_search(std::string(str), std::regex(std::string(p->as_string()), std::regex::ECMAScript))) {
      return at + ": does not match the pattern";
    }
    if (const auto* f = s.if_contains("format"); f && !format_ok(str, std::string_view(f->as_string()))) {
      return at + ": not a " + std::string(f->as_string());
    }
  }
  if (v.is_number()) {
    const double x = v.to_number<double>();
    if (const auto* m = s.if_contains("minimum"); m && x < m->to_number<double>()) return at + ": below minimum";
    if (const auto* m = s.if_contains("maximum"); m && x > m->to_number<double>()) return at + ": above maximum";
    if (const auto* m = s.if_contains("exclusiveMinimum"); m && m->is_number() && x <= m->to_number<double>()) {
      return at + ": not above exclusiveMinimum";
    }
    if (const auto* m = s.if_contains("exclusiveMaximum"); m && m->is_number() && x >= m->to_number<double>()) {
      return at + ": not below exclusiveMaximum";
    }
  }
  if (v.is_object()) {
    const json::object& o = v.as_object();
    const json::object* props = s.contains("properties") ? &s.at("properties").as_object() : nullptr;
    if (const auto* r = s.if_contains("required")) {
      for (const auto& k : r->as_array()) {
        if (!o.contains(k.as_string())) return at + ": lacks " + std::string(k.as_string());
      }
    }
    for (const auto& kv : o) {
      const std::string key(kv.key());
      if (props && props->contains(key)) {
        if (auto w = why_invalid(kv.value(), props->at(key), root, at + "." + key); !w.empty()) return w;
      } else if (const auto* ap = s.if_contains("additionalProperties")) {
        if (auto w = why_invalid(kv.value(), *ap, root, at + "." + key); !w.empty()) return w;
      }
    }
  }
  if (v.is_array()) {
    const json::array& a = v.as_array();
    if (const auto* m = s.if_contains("minItems"); m && a.size() < m->to_number<size_t>()) return at + ": too few items";
    if (const auto* m = s.if_contains("maxItems"); m && a.size() > m->to_number<size_t>()) return at + ": too many";
    size_t prefix = 0;
    if (const auto* p = s.if_contains("prefixItems")) {
      prefix = p->as_array().size();
      for (size_t i = 0; i < std::min(prefix, a.size()); ++i) {
        if (auto w = why_invalid(a[i], p->as_array()[i], root, fmt::format("{}[{}]", at, i)); !w.empty()) return w;
      }
    }
    if (const auto* it = s.if_contains("items")) {
      for (size_t i = prefix; i < a.size(); ++i) {
        if (auto w = why_invalid(a[i], *it, root, fmt::format("{}[{}]", at, i)); !w.empty()) return w;
      }
    }
  }
  return "";
}

// ---- the generator -------------------------------------------------------------------

class SchemaGenerator {
 public:
  explicit SchemaGenerator(uint64_t seed) : rng_(seed) {}

  json::value schema() {
    defs_.clear();
    json::value s = node(0);
    if (!defs_.empty()) s.as_object()["$defs"] = defs_;
    return s;
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }

  json::value node(int depth) {
    const int kind = depth >= 3 ? pick(6) : pick(11);
    switch (kind) {
      case 0: {
        json::object s{{"type", "string"}};
        switch (pick(5)) {
          case 0:
            s["minLength"] = pick(3);
            s["maxLength"] = 3 + pick(6);
            break;
          case 1:
            s["pattern"] = std::vector<const char*>{"^[a-z]{2,5}$", "^\\d{3}-\\d{4}$", "^(yes|no)$", "[A-Z]"}[static_cast<size_t>(pick(4))];
            break;
          case 2:
            s["format"] = std::vector<const char*>{"date", "time", "date-time", "uuid", "email", "ipv4"}[static_cast<size_t>(pick(6))];
            break;
          default:
            break;
        }
        return s;
      }
      case 1: {
        json::object s{{"type", "integer"}};
        if (coin()) s["minimum"] = pick(50) - 25;
        if (coin()) s["maximum"] = 30 + pick(2000);
        if (coin(0.2)) s["exclusiveMaximum"] = 40;
        return s;
      }
      case 2: {
        json::object s{{"type", "number"}};
        if (coin()) s[coin() ? "minimum" : "exclusiveMinimum"] = pick(10) - 5;
        if (coin()) s[coin() ? "maximum" : "exclusiveMaximum"] = 10 + pick(100);
        return s;
      }
      case 3:
        return json::object{{"type", "boolean"}};
      case 4: {
        json::array e;
        for (int i = 0, n = 1 + pick(4); i < n; ++i) {
          e.push_back(coin() ? json::value(fmt::format("v{}", i)) : json::value(i * 7 - 3));
        }
        return json::object{{"enum", e}};
      }
      case 5:
        return coin() ? json::object{{"const", "fixed"}} : json::object{{"type", json::array{"string", "null"}}};
      case 6:
      case 7: {
        json::object props;
        json::array required;
        for (int i = 0, n = 1 + pick(4); i < n; ++i) {
          const std::string key = fmt::format("{}{}", std::vector<const char*>{"name", "id", "tags", "x y", "é"}[static_cast<size_t>(pick(5))], i);
          props[key] = node(depth + 1);
          if (coin(0.6)) required.push_back(json::value(key));
        }
        return json::object{{"type", "object"}, {"properties", props}, {"required", required},
                            {"additionalProperties", false}};
      }
      case 8: {
        json::object s{{"type", "array"}, {"items", node(depth + 1)}};
        if (coin()) s["minItems"] = pick(3);
        if (coin()) s["maxItems"] = 3 + pick(3);
        return s;
      }
      case 9:
        return json::object{{"anyOf", json::array{node(depth + 1), json::object{{"type", "null"}}}}};
      default: {
        const std::string name = fmt::format("d{}", defs_.size());
        defs_[name] = nullptr;  // taken before the definition may add more
        json::value def = node(depth + 1);
        defs_[name] = std::move(def);
        return json::object{{"$ref", "#/$defs/" + name}};
      }
    }
  }

  std::mt19937_64 rng_;
  json::object defs_;
};

}  // namespace json_check

using json_check::SchemaGenerator;
using json_check::why_invalid;

}  // namespace hearth::testing
