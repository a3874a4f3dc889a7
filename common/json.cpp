#include "common/json.h"

#include <cmath>

namespace hearth {

Result<boost::json::value> json_parse(std::string_view text, std::string_view what, size_t max_depth) {
  boost::json::parse_options opts;
  opts.max_depth = max_depth;
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(boost::json::string_view(text.data(), text.size()), ec,
                                            boost::json::storage_ptr(), opts);
  if (ec) return make_error(ErrorCode::kFormat, "{} is not valid JSON: {}", what, ec.message());
  return v;
}

namespace {

const boost::json::value* find(const boost::json::object& obj, std::string_view key) {
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  if (it == obj.end() || it->value().is_null()) return nullptr;
  return &it->value();
}

Status wrong_type(std::string_view key, std::string_view expected) {
  return make_error(ErrorCode::kFormat, "field \"{}\" should be {}", key, expected);
}

}  // namespace

Result<std::optional<int64_t>> json_opt_int(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_int64()) return std::optional<int64_t>(v->as_int64());
  if (v->is_uint64() && v->as_uint64() <= static_cast<uint64_t>(INT64_MAX)) {
    return std::optional<int64_t>(static_cast<int64_t>(v->as_uint64()));
  }
  if (v->is_double()) {  // 1e5 or 4096.0 in hand-written configs
    const double d = v->as_double();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) {
      return std::optional<int64_t>(static_cast<int64_t>(d));
    }
  }
  return wrong_type(key, "an integer");
}

Result<std::optional<double>> json_opt_number(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  if (v == nullptr) return std::optional<double>();
  if (v->is_double()) return std::optional<double>(v->as_double());
  if (v->is_int64()) return std::optional<double>(static_cast<double>(v->as_int64()));
  if (v->is_uint64()) return std::optional<double>(static_cast<double>(v->as_uint64()));
  return wrong_type(key, "a number");
}

Result<std::optional<bool>> json_opt_bool(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  if (v == nullptr) return std::optional<bool>();
  if (v->is_bool()) return std::optional<bool>(v->as_bool());
  return wrong_type(key, "true or false");
}

Result<std::optional<std::string>> json_opt_string(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->is_string()) return std::optional<std::string>(std::string(v->as_string()));
  return wrong_type(key, "a string");
}

Result<int64_t> json_int(const boost::json::object& obj, std::string_view key) {
  HEARTH_ASSIGN_OR_RETURN(auto v, json_opt_int(obj, key));
  if (!v) return make_error(ErrorCode::kFormat, "field \"{}\" is missing", key);
  return *v;
}

const boost::json::object* json_find_object(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  return (v != nullptr && v->is_object()) ? &v->as_object() : nullptr;
}

const boost::json::array* json_find_array(const boost::json::object& obj, std::string_view key) {
  const auto* v = find(obj, key);
  return (v != nullptr && v->is_array()) ? &v->as_array() : nullptr;
}

}  // namespace hearth
