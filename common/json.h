// Boost.JSON with limits, and typed field access that returns Status instead of
// throwing. Used for config.json, tokenizer.json, safetensors headers and (later) HTTP
// bodies. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <boost/json.hpp>

#include "common/status.h"

namespace hearth {

// Parses `text` as one JSON document, nested at most `max_depth` deep. `what` names the
// document in the error ("config.json").
Result<boost::json::value> json_parse(std::string_view text, std::string_view what, size_t max_depth = 64);

// Field getters for an object. The optional forms return nullopt when the key is absent
// or null; every form fails with a message naming the key when the type is wrong.
Result<std::optional<int64_t>> json_opt_int(const boost::json::object& obj, std::string_view key);
Result<std::optional<double>> json_opt_number(const boost::json::object& obj, std::string_view key);
Result<std::optional<bool>> json_opt_bool(const boost::json::object& obj, std::string_view key);
Result<std::optional<std::string>> json_opt_string(const boost::json::object& obj, std::string_view key);
Result<int64_t> json_int(const boost::json::object& obj, std::string_view key);

// The object at `key`, or nullptr when absent or not an object.
const boost::json::object* json_find_object(const boost::json::object& obj, std::string_view key);
const boost::json::array* json_find_array(const boost::json::object& obj, std::string_view key);

}  // namespace hearth
