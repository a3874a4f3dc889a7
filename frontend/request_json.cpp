#include "frontend/request_json.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "common/utf8.h"

namespace hearth::request_json {

std::string_view kind_of(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null:
      return "null";
    case json::kind::bool_:
      return "a boolean";
    case json::kind::int64:
    case json::kind::uint64:
      return "an integer";
    case json::kind::double_:
      return "a number";
    case json::kind::string:
      return "a string";
    case json::kind::array:
      return "an array";
    case json::kind::object:
      return "an object";
  }
  return "a value of unknown kind";
}

std::string short_quote(std::string_view s) {
  constexpr size_t kMax = 40;
  if (s.size() <= kMax) return fmt::format("\"{}\"", s);
  return fmt::format("\"{}...\"", s.substr(0, utf8_complete_prefix(s.substr(0, kMax))));
}

const json::value* field(const json::object& obj, std::string_view key) {
  const auto it = obj.find(json::string_view(key.data(), key.size()));
  if (it == obj.end() || it->value().is_null()) return nullptr;
  return &it->value();
}

Status wrong_type(std::string_view path, std::string_view expected, const json::value& v) {
  return make_error(ErrorCode::kInvalidArgument, "{} must be {}, not {}", path, expected, kind_of(v));
}

Result<int64_t> integer_of(const json::value& v, std::string_view path) {
  if (v.is_int64()) return v.as_int64();
  if (v.is_uint64()) {
    return make_error(ErrorCode::kOutOfRange, "{} is too large: {}", path, v.as_uint64());
  }
  if (v.is_double()) {
    const double d = v.as_double();
    if (std::isfinite(d) && d == std::floor(d)) {
      if (std::fabs(d) < 9.0e18) return static_cast<int64_t>(d);
      return make_error(ErrorCode::kOutOfRange, "{} is too large: {}", path, d);
    }
    return make_error(ErrorCode::kInvalidArgument, "{} must be an integer, not {}", path, d);
  }
  return wrong_type(path, "an integer", v);
}

Result<std::optional<int64_t>> opt_integer(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  HEARTH_ASSIGN_OR_RETURN(const int64_t i, integer_of(*v, key));
  return std::optional<int64_t>(i);
}

Result<std::optional<int64_t>> opt_integer_in(const json::object& obj, std::string_view key, int64_t lo, int64_t hi) {
  HEARTH_ASSIGN_OR_RETURN(const auto v, opt_integer(obj, key));
  if (v && (*v < lo || *v > hi)) {
    if (hi != kInt32Max) {
      return make_error(ErrorCode::kOutOfRange, "{} must be between {} and {}, not {}", key, lo, hi, *v);
    }
    if (*v < lo) return make_error(ErrorCode::kOutOfRange, "{} must be at least {}, not {}", key, lo, *v);
    return make_error(ErrorCode::kOutOfRange, "{} must be at most {}, not {}", key, hi, *v);
  }
  return v;
}

Result<std::optional<double>> opt_number(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<double>();
  double d = 0.0;
  if (v->is_double()) {
    d = v->as_double();
  } else if (v->is_int64()) {
    d = static_cast<double>(v->as_int64());
  } else if (v->is_uint64()) {
    d = static_cast<double>(v->as_uint64());
  } else {
    return wrong_type(key, "a number", *v);
  }
  if (!std::isfinite(d)) return make_error(ErrorCode::kOutOfRange, "{} must be a finite number", key);
  return std::optional<double>(d);
}

Status read_float(const json::object& obj, const SamplingRange& range, float& out) {
  HEARTH_ASSIGN_OR_RETURN(const auto v, opt_number(obj, range.name));
  if (!v) return Status::ok();
  HEARTH_RETURN_IF_ERROR(sampling_range_check(range, *v));
  out = static_cast<float>(*v);
  return Status::ok();
}

Status read_bool(const json::object& obj, std::string_view key, bool& out) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return Status::ok();
  if (!v->is_bool()) return wrong_type(key, "true or false", *v);
  out = v->as_bool();
  return Status::ok();
}

Result<std::optional<std::string>> opt_string(const json::object& obj, std::string_view key) {
  const json::value* v = field(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return wrong_type(key, "a string", *v);
  return std::optional<std::string>(std::string(v->as_string()));
}

Result<std::vector<int32_t>> token_ids_of(const json::array& arr, std::string_view path) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", path, i);
    if (!arr[i].is_int64() && !arr[i].is_uint64() && !arr[i].is_double()) return wrong_type(at, "a token id", arr[i]);
    HEARTH_ASSIGN_OR_RETURN(const int64_t id, integer_of(arr[i], at));
    if (id < 0 || id > kInt32Max) return make_error(ErrorCode::kOutOfRange, "{} is not a token id: {}", at, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

bool is_number(const json::value& v) { return v.is_int64() || v.is_uint64() || v.is_double(); }

Status unknown_field_of(std::string_view name, std::string_view route, const ApiParseOptions& options,
                        std::vector<std::string>& ignored) {
  if (options.lenient_fields) {
    ignored.emplace_back(name);
    return Status::ok();
  }
  const bool plain = !name.empty() && name.size() <= 64 &&
                     name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.[]") ==
                         std::string_view::npos;
  return make_error(ErrorCode::kInvalidArgument,
                    "unknown field {}: POST {} has no such field, and this server refuses what it would otherwise "
                    "ignore (hearth-frontend --lenient-fields accepts and ignores unknown fields)",
                    plain ? std::string(name) : short_quote(name), route);
}


bool is_tool_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") ==
             std::string_view::npos;
}

Status unsupported(std::string_view what, std::string_view why) {
  return make_error(ErrorCode::kUnsupported, "{} is not supported: {}", what, why);
}

Status only_keys(const json::object& obj, std::string_view path, std::initializer_list<std::string_view> allowed) {
  for (const auto& kv : obj) {
    const std::string_view k(kv.key().data(), kv.key().size());
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      return make_error(ErrorCode::kInvalidArgument, "unknown field {}.{}", path, k);
    }
  }
  return Status::ok();
}

Result<ApiTool> flat_function_tool(const json::object& o, const std::string& at, std::string_view schema_key,
                                   bool schema_required) {
  ApiTool tool;
  const json::value* name = field(o, "name");
  if (name == nullptr || !name->is_string() || !is_tool_name(std::string_view(name->as_string()))) {
    return make_error(ErrorCode::kInvalidArgument, "{}.name is required: 1 to 64 letters, digits, _ or -", at);
  }
  tool.name = std::string(name->as_string());
  if (const json::value* d = field(o, "description"); d != nullptr) {
    if (!d->is_string()) return wrong_type(at + ".description", "a string", *d);
    tool.description = std::string(d->as_string());
  }
  const json::value* schema = field(o, schema_key);
  if (schema == nullptr && schema_required) {
    return make_error(ErrorCode::kInvalidArgument, "{}.{} is required", at, schema_key);
  }
  if (schema != nullptr) {
    if (!schema->is_object()) return wrong_type(fmt::format("{}.{}", at, schema_key), "a JSON schema object", *schema);
    tool.parameters = *schema;
  }
  json::object fn{{"name", tool.name}};
  if (!tool.description.empty()) fn["description"] = tool.description;
  if (!tool.parameters.is_null()) fn["parameters"] = tool.parameters;
  tool.definition = json::object{{"type", "function"}, {"function", std::move(fn)}};
  return tool;
}

}  // namespace hearth::request_json
