#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"

namespace hearth::grammar {

namespace json = boost::json;

namespace {

constexpr int kMaxDigits = 15;
constexpr int64_t kMaxMagnitude = 999'999'999'999'999;  // 15 digits

// Keywords that say something about a value but constrain nothing.
const std::set<std::string_view> kAnnotations = {
    "title",    "description", "default",  "examples",  "$schema",   "$id",
    "$comment", "deprecated",  "readOnly", "writeOnly", "$anchor",   "$defs",
    "definitions"};
const std::set<std::string_view> kKeywords = {
    "type",      "properties", "required",  "additionalProperties", "items",   "prefixItems",
    "minItems",  "maxItems",   "enum",      "const",                "anyOf",   "oneOf",
    "allOf",     "$ref",       "minLength", "maxLength",            "pattern", "format",
    "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "nullable",
    "uniqueItems"};

std::string digits_literal(std::string_view s) { return gbnf_literal(s); }

std::string repeat(std::string_view unit, int64_t lo, int64_t hi) {  // hi < 0: unbounded
  if (lo == 1 && hi == 1) return std::string(unit);
  if (hi < 0) return fmt::format("{}{{{},}}", unit, lo);
  if (lo == hi) return fmt::format("{}{{{}}}", unit, lo);
  return fmt::format("{}{{{},{}}}", unit, lo, hi);
}

// Alternatives for the decimal strings of [lo, hi], both of one length.
void same_length(const std::string& lo, const std::string& hi, const std::string& prefix,
                 std::vector<std::string>& out) {
  size_t i = 0;
  while (i < lo.size() && lo[i] == hi[i]) ++i;
  std::string p = prefix;
  if (i > 0) p += (p.empty() ? "" : " ") + digits_literal(lo.substr(0, i));
  if (i == lo.size()) {
    out.push_back(p.empty() ? "\"\"" : p);
    return;
  }
  const size_t rest = lo.size() - i - 1;
  const std::string lo_rest = lo.substr(i + 1), hi_rest = hi.substr(i + 1);
  const bool lo_zero = lo_rest.find_first_not_of('0') == std::string::npos;
  const bool hi_nine = hi_rest.find_first_not_of('9') == std::string::npos;
  const char d_lo = lo[i], d_hi = hi[i];
  const char mid_lo = lo_zero ? d_lo : static_cast<char>(d_lo + 1);
  const char mid_hi = hi_nine ? d_hi : static_cast<char>(d_hi - 1);
  auto join = [](const std::string& a, const std::string& b) { return a.empty() ? b : a + " " + b; };
  if (!lo_zero) same_length(lo_rest, std::string(rest, '9'), join(p, digits_literal(std::string(1, d_lo))), out);
  if (mid_lo <= mid_hi) {
    std::string s = join(p, mid_lo == mid_hi ? digits_literal(std::string(1, mid_lo))
                                             : fmt::format("[{}-{}]", mid_lo, mid_hi));
    if (rest > 0) s = join(s, repeat("[0-9]", static_cast<int64_t>(rest), static_cast<int64_t>(rest)));
    out.push_back(s);
  }
  if (!hi_nine) same_length(std::string(rest, '0'), hi_rest, join(p, digits_literal(std::string(1, d_hi))), out);
}

int digit_count(int64_t v) { return static_cast<int>(std::to_string(v).size()); }

// Alternatives for [a, b], 0 <= a <= b <= kMaxMagnitude, without leading zeros.
std::vector<std::string> nonneg_range(int64_t a, int64_t b) {
  std::vector<std::string> out;
  if (a == 0 && b == kMaxMagnitude) return {"\"0\"", fmt::format("[1-9] [0-9]{{0,{}}}", kMaxDigits - 1)};
  if (a <= 1 && b == kMaxMagnitude) {
    if (a == 0) out.push_back("\"0\"");
    out.push_back(fmt::format("[1-9] [0-9]{{0,{}}}", kMaxDigits - 1));
    return out;
  }
  int64_t pow = 1;
  for (int len = 1; len <= digit_count(b); ++len, pow *= 10) {
    const int64_t lo = std::max(a, len == 1 ? int64_t{0} : pow);
    const int64_t hi = std::min(b, pow * 10 - 1);
    if (lo > hi) continue;
    same_length(std::to_string(lo), std::to_string(hi), "", out);
  }
  return out;
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.size() == 1) return alts[0];
  return "(" + fmt::format("{}", fmt::join(alts, " | ")) + ")";
}

// A bound of a number range: a whole number, possibly exclusive; or none.
struct Bound {
  bool present = false;
  double value = 0;
  bool exclusive = false;
};

// The non-negative reals y with a (<, <=) y (<, <=) b, a and b whole, as GBNF
// alternatives; no exponent. `b_inf`: no upper bound (up to 15 digits).
void nonneg_real(int64_t a, bool a_excl, int64_t b, bool b_excl, bool b_inf, const std::string& sign,
                 std::vector<std::string>& out) {
  const std::string any_frac = fmt::format("(\".\" [0-9]{{1,{}}})?", kMaxDigits);
  const std::string nonzero_frac = fmt::format("\".\" [0-9]{{0,{}}} [1-9]", kMaxDigits - 1);
  const std::string zero_frac = fmt::format("(\".\" \"0\"{{1,{}}})?", kMaxDigits);
  const int64_t lo_int = a_excl ? a + 1 : a;
  const int64_t hi_int = b_inf ? kMaxMagnitude : b - 1;
  auto with_sign = [&](const std::string& s) { return sign.empty() ? s : sign + " " + s; };
  if (lo_int <= hi_int) out.push_back(with_sign(alternatives(nonneg_range(lo_int, hi_int)) + " " + any_frac));
  if (a_excl && (b_inf || a < b)) out.push_back(with_sign(digits_literal(std::to_string(a)) + " " + nonzero_frac));
  if (!b_inf && !b_excl && (b > a || !a_excl)) out.push_back(with_sign(digits_literal(std::to_string(b)) + " " + zero_frac));
}

std::string key_literal(std::string_view key) {
  return gbnf_literal(json::serialize(json::string(key.data(), key.size())));
}

bool is_integer_value(const json::value& v) {
  if (v.is_int64() || v.is_uint64()) return true;
  return v.is_double() && std::isfinite(v.as_double()) && v.as_double() == std::floor(v.as_double());
}

bool type_matches(const json::value& v, std::string_view type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return is_integer_value(v);
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_bool();
  if (type == "null") return v.is_null();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  return false;
}

std::string sanitize(std::string_view s) {
  std::string out;
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    out += ok ? c : '-';
    if (out.size() >= 40) break;
  }
  return out.empty() ? "x" : out;
}

// JSON Pointer (RFC 6901) lookup from `root`.
const json::value* resolve_pointer(const json::value& root, std::string_view pointer) {
  const json::value* v = &root;
  size_t i = 0;
  while (i < pointer.size()) {
    if (pointer[i] != '/') return nullptr;
    size_t j = pointer.find('/', i + 1);
    if (j == std::string_view::npos) j = pointer.size();
    std::string token;
    for (size_t k = i + 1; k < j; ++k) {
      if (pointer[k] == '~' && k + 1 < j) {
        token += pointer[k + 1] == '1' ? '/' : '~';
        ++k;
      } else {
        token += pointer[k];
      }
    }
    if (v->is_object()) {
      const auto it = v->as_object().find(token);
      if (it == v->as_object().end()) return nullptr;
      v = &it->value();
    } else if (v->is_array()) {
      size_t index = 0;
      if (token.empty() || token.find_first_not_of("0123456789") != std::string::npos) return nullptr;
      index = std::stoul(token);
      if (index >= v->as_array().size()) return nullptr;
      v = &v->as_array()[index];
    } else {
      return nullptr;
    }
    i = j;
  }
  return v;
}

}  // namespace

struct JsonGrammarBuilder::Visit {
  const json::value* root = nullptr;
  std::string prefix;
  std::map<std::string, std::string> refs;  // ref -> rule name
};

JsonGrammarBuilder::JsonGrammarBuilder(const JsonSchemaOptions& options) : options_(options) {}

void JsonGrammarBuilder::add_rule(const std::string& name, std::string body) {
  if (!rules_.contains(name)) order_.push_back(name);
  rules_[name] = std::move(body);
}

std::string JsonGrammarBuilder::unique_name(std::string_view hint) {
  std::string base = sanitize(hint);
  std::string name = base;
  for (int k = 2; rules_.contains(name); ++k) name = fmt::format("{}-{}", base, k);
  add_rule(name, "\"\"");  // reserved; the caller sets the body
  return name;
}

// The shared rules, added once: ws, char, string, integer, number, boolean, null and the
// any-value family.
std::string JsonGrammarBuilder::primitive(std::string_view which) {
  const std::string name = fmt::format("j-{}", which);
  if (rules_.contains(name)) return name;
  if (which == "ws") {
    add_rule(name, options_.whitespace ? "(\" \" | \"\\n\" [ \\t]{0,20})?" : "\"\"");
  } else if (which == "char") {
    add_rule(name,
             R"([^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-CeEfF] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2})))");
  } else if (which == "string") {
    add_rule(name, "\"\\\"\" " + primitive("char") + "* \"\\\"\"");
  } else if (which == "integer") {
    add_rule(name, fmt::format("\"-\"? (\"0\" | [1-9] [0-9]{{0,{}}})", kMaxDigits - 1));
  } else if (which == "number") {
    add_rule(name, fmt::format("{} (\".\" [0-9]{{1,{}}})? ([eE] [-+]? [0-9]{{1,2}})?", primitive("integer"), kMaxDigits));
  } else if (which == "boolean") {
    add_rule(name, "\"true\" | \"false\"");
  } else if (which == "null") {
    add_rule(name, "\"null\"");
  } else if (which == "value") {
    add_rule(name, "\"\"");  // reserved: object and array refer back to it
    const std::string ws = primitive("ws");
    const std::string object = "j-object", array = "j-array";
    add_rule(object, fmt::format("\"{{\" {ws} ({s} {ws} \":\" {ws} {v} {ws} (\",\" {ws} {s} {ws} \":\" {ws} {v} {ws})*)? \"}}\"",
                                 fmt::arg("ws", ws), fmt::arg("s", primitive("string")), fmt::arg("v", name)));
    add_rule(array, fmt::format("\"[\" {ws} ({v} {ws} (\",\" {ws} {v} {ws})*)? \"]\"", fmt::arg("ws", ws),
                                fmt::arg("v", name)));
    add_rule(name, fmt::format("{} | {} | {} | {} | {} | {}", object, array, primitive("string"), primitive("number"),
                               primitive("boolean"), primitive("null")));
  }
  return name;
}

std::string JsonGrammarBuilder::any_value() { return primitive("value"); }
std::string JsonGrammarBuilder::any_object() {
  primitive("value");
  return "j-object";
}

std::string JsonGrammarBuilder::gbnf(std::string_view root_body) const {
  std::string out = fmt::format("root ::= {}\n", root_body);
  for (const std::string& name : order_) out += fmt::format("{} ::= {}\n", name, rules_.at(name));
  return out;
}

Result<std::string> JsonGrammarBuilder::add_schema(const json::value& schema, std::string_view name) {
  Visit ctx;
  ctx.root = &schema;
  ctx.prefix = sanitize(name);
  return visit(schema, ctx.prefix, "schema", 0, ctx);
}

Result<std::string> JsonGrammarBuilder::visit_ref(const std::string& ref, const std::string& path, size_t depth,
                                                  Visit& ctx) {
  const auto known = ctx.refs.find(ref);
  if (known != ctx.refs.end()) return known->second;
  if (!ref.starts_with("#")) {
    return make_error(ErrorCode::kUnsupported, "{}.$ref \"{}\": only references into this schema (#...) are supported",
                      path, ref);
  }
  const json::value* target = resolve_pointer(*ctx.root, std::string_view(ref).substr(1));
  if (target == nullptr) return make_error(ErrorCode::kInvalidArgument, "{}.$ref \"{}\" points at nothing", path, ref);
  // Named before its body is built, so that a recursive schema refers to itself.
  const std::string name = unique_name(ctx.prefix + "-ref-" + ref.substr(ref.find_last_of('/') + 1));
  ctx.refs.emplace(ref, name);
  HEARTH_ASSIGN_OR_RETURN(const std::string body, visit(*target, name + "-def", "#" + ref.substr(1), depth + 1, ctx));
  add_rule(name, body);
  return name;
}

Result<std::string> JsonGrammarBuilder::visit(const json::value& schema, const std::string& name,
                                              const std::string& path, size_t depth, Visit& ctx) {
  if (depth > options_.max_depth) {
    return make_error(ErrorCode::kInvalidArgument, "{}: the schema nests deeper than {}", path, options_.max_depth);
  }
  if (rules_.size() > options_.max_rules) {
    return make_error(ErrorCode::kInvalidArgument, "the schema is too large: it needs more than {} grammar rules",
                      options_.max_rules);
  }
  if (schema.is_bool()) {
    if (schema.as_bool()) return any_value();
    return make_error(ErrorCode::kInvalidArgument, "{}: the schema false matches nothing", path);
  }
  if (!schema.is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "{}: a schema must be an object or a boolean", path);
  }
  const json::object& s = schema.as_object();
  std::vector<std::string> constraining;
  for (const auto& kv : s) {
    const std::string_view key(kv.key().data(), kv.key().size());
    if (kAnnotations.contains(key)) continue;
    if (!kKeywords.contains(key)) {
      return make_error(ErrorCode::kUnsupported, "{}.{} is not supported in a schema for constrained decoding", path,
                        key);
    }
    constraining.emplace_back(key);
  }
  auto has = [&](std::string_view k) { return s.contains(json::string_view(k.data(), k.size())); };
  auto only = [&](std::initializer_list<std::string_view> allowed, std::string_view what) -> Status {
    for (const std::string& k : constraining) {
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        return make_error(ErrorCode::kUnsupported, "{}.{} beside {} is not supported", path, k, what);
      }
    }
    return Status::ok();
  };
  if (const auto* u = s.if_contains("uniqueItems"); u != nullptr && !(u->is_bool() && !u->as_bool())) {
    return make_error(ErrorCode::kUnsupported, "{}.uniqueItems is not supported in a schema for constrained decoding",
                      path);
  }
  if (has("nullable")) {
    const json::value& n = s.at("nullable");
    if (!n.is_bool()) return make_error(ErrorCode::kInvalidArgument, "{}.nullable must be true or false", path);
    if (n.as_bool()) {
      json::object rest = s;
      rest.erase("nullable");
      HEARTH_ASSIGN_OR_RETURN(const std::string inner, visit(rest, name, path, depth + 1, ctx));
      const std::string rule = unique_name(name + "-or-null");
      add_rule(rule, inner + " | " + primitive("null"));
      return rule;
    }
  }
  if (has("$ref")) {
    HEARTH_RETURN_IF_ERROR(only({"$ref", "nullable"}, "$ref"));
    const json::value& r = s.at("$ref");
    if (!r.is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.$ref must be a string", path);
    return visit_ref(std::string(r.as_string()), path, depth, ctx);
  }
  std::vector<std::string> types;
  if (has("type")) {
    const json::value& t = s.at("type");
    if (t.is_string()) {
      types.emplace_back(t.as_string());
    } else if (t.is_array() && !t.as_array().empty()) {
      for (const json::value& x : t.as_array()) {
        if (!x.is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.type must hold type names", path);
        types.emplace_back(x.as_string());
      }
    } else {
      return make_error(ErrorCode::kInvalidArgument, "{}.type must be a type name or a list of them", path);
    }
    for (const std::string& t2 : types) {
      static const std::set<std::string> kTypes = {"string", "integer", "number", "boolean",
                                                   "null",   "object",  "array"};
      if (!kTypes.contains(t2)) return make_error(ErrorCode::kInvalidArgument, "{}.type \"{}\" is not a JSON type", path, t2);
    }
  }
  auto typed_ok = [&](const json::value& v) {
    return types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return type_matches(v, t); });
  };
  if (has("const")) {
    const json::value& c = s.at("const");
    if (!typed_ok(c)) return make_error(ErrorCode::kInvalidArgument, "{}.const is not of the schema's type", path);
    const std::string rule = unique_name(name + "-const");
    add_rule(rule, gbnf_literal(json::serialize(c)));
    return rule;
  }
  if (has("enum")) {
    const json::value& e = s.at("enum");
    if (!e.is_array() || e.as_array().empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{}.enum must be a non-empty array", path);
    }
    std::vector<std::string> alts;
    for (const json::value& v : e.as_array()) {
      if (typed_ok(v)) alts.push_back(gbnf_literal(json::serialize(v)));
    }
    if (alts.empty()) return make_error(ErrorCode::kInvalidArgument, "{}.enum has no value of the schema's type", path);
    const std::string rule = unique_name(name + "-enum");
    add_rule(rule, fmt::format("{}", fmt::join(alts, " | ")));
    return rule;
  }
  for (const char* combinator : {"anyOf", "oneOf"}) {
    if (!has(combinator)) continue;
    HEARTH_RETURN_IF_ERROR(only({combinator}, combinator));
    const json::value& list = s.at(combinator);
    if (!list.is_array() || list.as_array().empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{}.{} must be a non-empty array of schemas", path, combinator);
    }
    std::vector<std::string> alts;
    for (size_t i = 0; i < list.as_array().size(); ++i) {
      HEARTH_ASSIGN_OR_RETURN(std::string alt, visit(list.as_array()[i], fmt::format("{}-{}", name, i),
                                                     fmt::format("{}.{}[{}]", path, combinator, i), depth + 1, ctx));
      alts.push_back(std::move(alt));
    }
    const std::string rule = unique_name(name);
    add_rule(rule, fmt::format("{}", fmt::join(alts, " | ")));
    return rule;
  }
  if (has("allOf")) {
    HEARTH_RETURN_IF_ERROR(only({"allOf"}, "allOf"));
    const json::value& list = s.at("allOf");
    if (!list.is_array() || list.as_array().size() != 1) {
      return make_error(ErrorCode::kUnsupported, "{}.allOf with other than one schema is not supported", path);
    }
    return visit(list.as_array()[0], name, path + ".allOf[0]", depth + 1, ctx);
  }
  if (types.empty()) {
    // No type: what the keywords are about, or any value.
    std::set<std::string> implied;
    for (const std::string& k : constraining) {
      if (k == "properties" || k == "required" || k == "additionalProperties") implied.insert("object");
      if (k == "items" || k == "prefixItems" || k == "minItems" || k == "maxItems") implied.insert("array");
      if (k == "minLength" || k == "maxLength" || k == "pattern" || k == "format") implied.insert("string");
      if (k == "minimum" || k == "maximum" || k == "exclusiveMinimum" || k == "exclusiveMaximum" ||
          k == "multipleOf") {
        implied.insert("number");
      }
    }
    if (implied.empty()) return any_value();
    if (implied.size() > 1) {
      return make_error(ErrorCode::kUnsupported, "{}: keywords of several types without a type; give one", path);
    }
    types.push_back(*implied.begin());
  }
  std::vector<std::string> alts;
  for (const std::string& t : types) {
    HEARTH_ASSIGN_OR_RETURN(std::string alt, visit_type(s, t, types.size() > 1 ? name + "-" + t : name, path, depth, ctx));
    alts.push_back(std::move(alt));
  }
  if (alts.size() == 1) return alts[0];
  const std::string rule = unique_name(name);
  add_rule(rule, fmt::format("{}", fmt::join(alts, " | ")));
  return rule;
}

Result<std::string> JsonGrammarBuilder::visit_type(const json::object& s, std::string_view type,
                                                   const std::string& name, const std::string& path, size_t depth,
                                                   Visit& ctx) {
  if (type == "string") return string_rule(s, name, path);
  if (type == "integer") return number_rule(s, true, name, path);
  if (type == "number") return number_rule(s, false, name, path);
  if (type == "boolean") return primitive("boolean");
  if (type == "null") return primitive("null");
  if (type == "object") return object_rule(s, name, path, depth, ctx);
  return array_rule(s, name, path, depth, ctx);
}

Result<std::string> JsonGrammarBuilder::object_rule(const json::object& s, const std::string& name,
                                                    const std::string& path, size_t depth, Visit& ctx) {
  const json::value* props = s.if_contains("properties");
  const json::value* additional = s.if_contains("additionalProperties");
  const json::value* required = s.if_contains("required");
  if (props != nullptr && !props->is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "{}.properties must be an object", path);
  }
  std::set<std::string> req;
  if (required != nullptr) {
    if (!required->is_array()) return make_error(ErrorCode::kInvalidArgument, "{}.required must be an array", path);
    for (const json::value& r : required->as_array()) {
      if (!r.is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.required must hold names", path);
      req.emplace(r.as_string());
    }
  }
  if (additional != nullptr && !additional->is_bool() && !additional->is_object()) {
    return make_error(ErrorCode::kInvalidArgument, "{}.additionalProperties must be a boolean or a schema", path);
  }
  const std::string ws = primitive("ws");
  const bool no_props = props == nullptr || props->as_object().empty();
  if (no_props) {
    if (!req.empty()) {
      return make_error(ErrorCode::kInvalidArgument, "{}.required names properties the schema does not define", path);
    }
    if (additional != nullptr && additional->is_bool() && !additional->as_bool()) {
      const std::string rule = unique_name(name + "-empty");
      add_rule(rule, fmt::format("\"{{\" {} \"}}\"", ws));
      return rule;
    }
    if (additional == nullptr || additional->is_bool()) return any_object();
    // A map: any keys, values of one schema.
    HEARTH_ASSIGN_OR_RETURN(const std::string value,
                            visit(*additional, name + "-value", path + ".additionalProperties", depth + 1, ctx));
    const std::string key = primitive("string");
    const std::string rule = unique_name(name);
    add_rule(rule, fmt::format("\"{{\" {ws} ({k} {ws} \":\" {ws} {v} {ws} (\",\" {ws} {k} {ws} \":\" {ws} {v} {ws})*)? \"}}\"",
                               fmt::arg("ws", ws), fmt::arg("k", key), fmt::arg("v", value)));
    return rule;
  }
  struct Prop {
    std::string kv;  // key, colon, value, trailing whitespace
    bool required = false;
  };
  std::vector<Prop> list;
  for (const auto& kv : props->as_object()) {
    const std::string key(kv.key().data(), kv.key().size());
    HEARTH_ASSIGN_OR_RETURN(const std::string value,
                            visit(kv.value(), name + "-" + key, path + ".properties." + key, depth + 1, ctx));
    list.push_back({fmt::format("{} {} \":\" {} {} {}", key_literal(key), ws, ws, value, ws), req.contains(key)});
    req.erase(key);
  }
  if (!req.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "{}.required names \"{}\", which properties does not define", path,
                      *req.begin());
  }
  // tail(i): properties i.. after at least one was written (each with a leading comma);
  // head(i): properties i.. before any was.
  const size_t n = list.size();
  std::vector<std::string> tail(n + 1), head(n + 1);
  tail[n] = "\"\"";
  head[n] = "\"\"";
  for (size_t i = n; i-- > 0;) {
    const std::string comma_kv = fmt::format("\",\" {} {}", ws, list[i].kv);
    const std::string t = unique_name(fmt::format("{}-tail{}", name, i));
    add_rule(t, list[i].required ? fmt::format("{} {}", comma_kv, tail[i + 1])
                                 : fmt::format("({})? {}", comma_kv, tail[i + 1]));
    tail[i] = t;
    const std::string h = unique_name(fmt::format("{}-head{}", name, i));
    add_rule(h, list[i].required ? fmt::format("{} {}", list[i].kv, tail[i + 1])
                                 : fmt::format("{} {} | {}", list[i].kv, tail[i + 1], head[i + 1]));
    head[i] = h;
  }
  const std::string rule = unique_name(name);
  add_rule(rule, fmt::format("\"{{\" {} {} \"}}\"", ws, head[0]));
  return rule;
}

Result<std::string> JsonGrammarBuilder::array_rule(const json::object& s, const std::string& name,
                                                   const std::string& path, size_t depth, Visit& ctx) {
  auto count = [&](std::string_view key, int64_t fallback) -> Result<int64_t> {
    const json::value* v = s.if_contains(json::string_view(key.data(), key.size()));
    if (v == nullptr) return fallback;
    if (!is_integer_value(*v) || v->to_number<double>() < 0 || v->to_number<double>() > 100000) {
      return make_error(ErrorCode::kInvalidArgument, "{}.{} must be a whole number in 0..100000", path, key);
    }
    return static_cast<int64_t>(v->to_number<double>());
  };
  HEARTH_ASSIGN_OR_RETURN(const int64_t min_items, count("minItems", 0));
  HEARTH_ASSIGN_OR_RETURN(const int64_t max_items, count("maxItems", -1));
  if (max_items >= 0 && max_items < min_items) {
    return make_error(ErrorCode::kInvalidArgument, "{}: maxItems is below minItems", path);
  }
  std::vector<std::string> prefix;
  if (const json::value* p = s.if_contains("prefixItems"); p != nullptr) {
    if (!p->is_array()) return make_error(ErrorCode::kInvalidArgument, "{}.prefixItems must be an array", path);
    for (size_t i = 0; i < p->as_array().size(); ++i) {
      if (max_items >= 0 && static_cast<int64_t>(prefix.size()) >= max_items) break;
      HEARTH_ASSIGN_OR_RETURN(std::string item, visit(p->as_array()[i], fmt::format("{}-{}", name, i),
                                                      fmt::format("{}.prefixItems[{}]", path, i), depth + 1, ctx));
      prefix.push_back(std::move(item));
    }
  }
  std::string item;  // empty: no further items
  const json::value* items = s.if_contains("items");
  if (items != nullptr && items->is_array()) {
    return make_error(ErrorCode::kUnsupported, "{}.items as an array (draft 4 tuples) is not supported: use prefixItems",
                      path);
  }
  if (items == nullptr || !items->is_bool() || items->as_bool()) {
    HEARTH_ASSIGN_OR_RETURN(item, items == nullptr ? Result<std::string>(any_value())
                                                   : visit(*items, name + "-item", path + ".items", depth + 1, ctx));
  }
  const auto p = static_cast<int64_t>(prefix.size());
  const int64_t extra_min = std::max<int64_t>(0, min_items - p);
  const int64_t extra_max = item.empty() ? 0 : (max_items < 0 ? -1 : max_items - p);
  if (extra_max >= 0 && extra_min > extra_max) {
    return make_error(ErrorCode::kInvalidArgument, "{}: no array satisfies minItems with these items", path);
  }
  const std::string ws = primitive("ws");
  std::string body = "\"[\" " + ws;
  std::vector<std::string> seq;
  for (int64_t i = 0; i < p; ++i) seq.push_back(fmt::format("{}{} {}", i == 0 ? "" : "\",\" " + ws + " ", prefix[static_cast<size_t>(i)], ws));
  const std::string more = fmt::format("(\",\" {} {} {})", ws, item, ws);
  if (!item.empty() && (extra_max < 0 || extra_max > 0)) {
    if (p > 0) {
      seq.push_back(repeat(more, extra_min, extra_max));
    } else if (extra_min >= 1) {
      seq.push_back(fmt::format("{} {}", item, ws));
      seq.push_back(repeat(more, extra_min - 1, extra_max < 0 ? -1 : extra_max - 1));
    } else {
      seq.push_back(fmt::format("({} {} {})?", item, ws, repeat(more, 0, extra_max < 0 ? -1 : extra_max - 1)));
    }
  }
  for (const std::string& part : seq) body += " " + part;
  body += " \"]\"";
  const std::string rule = unique_name(name);
  add_rule(rule, body);
  return rule;
}

Result<std::string> JsonGrammarBuilder::string_rule(const json::object& s, const std::string& name,
                                                    const std::string& path) {
  const json::value* min_len = s.if_contains("minLength");
  const json::value* max_len = s.if_contains("maxLength");
  const json::value* pattern = s.if_contains("pattern");
  const json::value* format = s.if_contains("format");
  const bool lengths = min_len != nullptr || max_len != nullptr;
  if ((pattern != nullptr || format != nullptr) && lengths) {
    return make_error(ErrorCode::kUnsupported, "{}: minLength or maxLength beside {} is not supported", path,
                      pattern != nullptr ? "pattern" : "format");
  }
  if (pattern != nullptr && format != nullptr) {
    return make_error(ErrorCode::kUnsupported, "{}: pattern beside format is not supported", path);
  }
  const std::string q = "\"\\\"\"";
  std::string content;
  if (pattern != nullptr) {
    if (!pattern->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.pattern must be a string", path);
    auto g = regex_to_gbnf(std::string_view(pattern->as_string()), RegexTarget::kJsonString);
    if (!g.is_ok()) return g.status().with_context(path + ".pattern");
    content = *g;
  } else if (format != nullptr) {
    if (!format->is_string()) return make_error(ErrorCode::kInvalidArgument, "{}.format must be a string", path);
    const std::string_view f(format->as_string().data(), format->as_string().size());
    const std::string d2 = "[0-9] [0-9]";
    const std::string date =
        "[0-9]{4} \"-\" ((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
        "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | \"02\" \"-\" (\"0\" [1-9] | [12] [0-9]))";
    const std::string time =
        "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
        "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
    if (f == "date") {
      content = date;
    } else if (f == "time") {
      content = time;
    } else if (f == "date-time") {
      content = date + " \"T\" " + time;
    } else if (f == "uuid") {
      content = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
    } else if (f == "email") {
      content =
          "[A-Za-z0-9_+-]{1,20} (\".\" [A-Za-z0-9_+-]{1,20}){0,3} \"@\" "
          "([A-Za-z0-9] ([A-Za-z0-9-]{0,20} [A-Za-z0-9])? \".\"){1,3} [A-Za-z]{2,10}";
    } else if (f == "ipv4") {
      const std::string octet = "(\"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9] [0-9] | [0-9])";
      content = fmt::format("{0} \".\" {0} \".\" {0} \".\" {0}", octet);
    } else {
      return make_error(ErrorCode::kUnsupported,
                        "{}.format \"{}\" is not supported (date, time, date-time, uuid, email and ipv4 are)", path, f);
    }
  } else if (lengths) {
    auto len = [&](const json::value* v, std::string_view key, int64_t fallback) -> Result<int64_t> {
      if (v == nullptr) return fallback;
      if (!is_integer_value(*v) || v->to_number<double>() < 0 || v->to_number<double>() > 100000) {
        return make_error(ErrorCode::kInvalidArgument, "{}.{} must be a whole number in 0..100000", path, key);
      }
      return static_cast<int64_t>(v->to_number<double>());
    };
    HEARTH_ASSIGN_OR_RETURN(const int64_t lo, len(min_len, "minLength", 0));
    HEARTH_ASSIGN_OR_RETURN(const int64_t hi, len(max_len, "maxLength", -1));
    if (hi >= 0 && hi < lo) return make_error(ErrorCode::kInvalidArgument, "{}: maxLength is below minLength", path);
    if (hi == 0) {
      content = "\"\"";
    } else {
      content = repeat(primitive("char"), lo, hi);
      if (lo == 0 && hi < 0) content = primitive("char") + "*";
    }
  } else {
    return primitive("string");
  }
  const std::string rule = unique_name(name);
  add_rule(rule, fmt::format("{} {} {}", q, content, q));
  return rule;
}

Result<std::string> JsonGrammarBuilder::number_rule(const json::object& s, bool integer, const std::string& name,
                                                    const std::string& path) {
  auto bound = [&](std::string_view key, std::string_view exclusive_key, bool lower) -> Result<Bound> {
    Bound b;
    const json::value* v = s.if_contains(json::string_view(key.data(), key.size()));
    const json::value* x = s.if_contains(json::string_view(exclusive_key.data(), exclusive_key.size()));
    if (x != nullptr && x->is_bool()) {  // draft 4: a flag on the bound
      if (x->as_bool() && v == nullptr) {
        return make_error(ErrorCode::kInvalidArgument, "{}.{} is true without {}", path, exclusive_key, key);
      }
      x = nullptr;
      b.exclusive = s.at(exclusive_key).as_bool();
    }
    const json::value* use = v;
    if (x != nullptr) {
      if (!x->is_number()) return make_error(ErrorCode::kInvalidArgument, "{}.{} must be a number", path, exclusive_key);
      // Both given: the tighter one applies.
      const double xv = x->to_number<double>();
      if (v == nullptr || (lower ? xv >= v->to_number<double>() : xv <= v->to_number<double>())) {
        use = x;
        b.exclusive = true;
      }
    }
    if (use == nullptr) return b;
    if (!use->is_number()) return make_error(ErrorCode::kInvalidArgument, "{}.{} must be a number", path, key);
    b.value = use->to_number<double>();
    // Bounds beyond what the grammar writes anyway (15 digits) bind nothing: zod's
    // int() is +-(2^53 - 1), say.
    if (lower ? b.value < -static_cast<double>(kMaxMagnitude) : b.value > static_cast<double>(kMaxMagnitude)) {
      return Bound{};
    }
    b.present = true;
    if (!std::isfinite(b.value) || std::fabs(b.value) > static_cast<double>(kMaxMagnitude)) {
      return make_error(ErrorCode::kUnsupported, "{}.{} {}: bounds beyond 15 digits are not supported", path, key,
                        b.value);
    }
    return b;
  };
  HEARTH_ASSIGN_OR_RETURN(Bound lo, bound("minimum", "exclusiveMinimum", true));
  HEARTH_ASSIGN_OR_RETURN(Bound hi, bound("maximum", "exclusiveMaximum", false));
  if (const json::value* m = s.if_contains("multipleOf"); m != nullptr) {
    if (!(integer && m->is_number() && m->to_number<double>() == 1.0)) {
      return make_error(ErrorCode::kUnsupported, "{}.multipleOf is not supported (except 1 on integers)", path);
    }
  }
  if (!lo.present && !hi.present) return primitive(integer ? "integer" : "number");
  std::string body;
  if (integer) {
    int64_t a = -kMaxMagnitude, b = kMaxMagnitude;
    if (lo.present) a = static_cast<int64_t>(lo.exclusive ? std::floor(lo.value) + 1 : std::ceil(lo.value));
    if (hi.present) b = static_cast<int64_t>(hi.exclusive ? std::ceil(hi.value) - 1 : std::floor(hi.value));
    if (a > b) return make_error(ErrorCode::kInvalidArgument, "{}: no integer lies between its bounds", path);
    body = integer_range_gbnf(a, b);
  } else {
    for (const Bound* b : {&lo, &hi}) {
      if (b->present && b->value != std::floor(b->value)) {
        return make_error(ErrorCode::kUnsupported, "{}: number bounds must be whole numbers, not {}", path, b->value);
      }
    }
    const auto lv = static_cast<int64_t>(lo.value), hv = static_cast<int64_t>(hi.value);
    if (lo.present && hi.present && (lv > hv || (lv == hv && (lo.exclusive || hi.exclusive)))) {
      return make_error(ErrorCode::kInvalidArgument, "{}: no number lies between its bounds", path);
    }
    std::vector<std::string> alts;
    // x >= 0
    if (!hi.present || hv > 0 || (hv == 0 && !hi.exclusive)) {
      const bool from_zero = !lo.present || lv < 0;
      nonneg_real(from_zero ? 0 : lv, !from_zero && lo.exclusive, hv, hi.exclusive, !hi.present, "", alts);
    }
    // x < 0, written as "-" y with y > 0
    if (!lo.present || lv < 0) {
      const bool hi_nonneg = !hi.present || hv >= 0;
      nonneg_real(hi_nonneg ? 0 : -hv, hi_nonneg ? true : hi.exclusive, -lv, lo.exclusive, !lo.present, "\"-\"",
                  alts);
    }
    if (alts.empty()) return make_error(ErrorCode::kInvalidArgument, "{}: no number lies between its bounds", path);
    body = fmt::format("{}", fmt::join(alts, " | "));
  }
  const std::string rule = unique_name(name);
  add_rule(rule, body);
  return rule;
}

std::string integer_range_gbnf(int64_t lo, int64_t hi) {
  std::vector<std::string> alts;
  if (hi >= 0) {
    for (std::string& a : nonneg_range(std::max<int64_t>(lo, 0), hi)) alts.push_back(std::move(a));
  }
  if (lo < 0) {
    for (const std::string& a : nonneg_range(hi < 0 ? -hi : 1, -lo)) alts.push_back("\"-\" " + a);
  }
  return alternatives(alts);
}

Result<std::string> json_schema_to_gbnf(const json::value& schema, const JsonSchemaOptions& options) {
  JsonGrammarBuilder builder(options);
  HEARTH_ASSIGN_OR_RETURN(const std::string root, builder.add_schema(schema, "root-value"));
  return builder.gbnf(root);
}

}  // namespace hearth::grammar
