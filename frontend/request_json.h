// Reading an API request's JSON: typed field readers whose errors name the field's path
// ("messages[2].role must be a string, not an integer"), shared by the parser of the
// OpenAI request (openai.cpp) and of its structured-output, tool and sampling extensions
// (openai_structured.cpp). Internal to frontend/.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/sampling_params.h"
#include "common/status.h"
#include "frontend/openai.h"

namespace hearth::request_json {

namespace json = boost::json;

inline constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
inline constexpr int64_t kMaxChoices = 8;  // n and best_of at most

// "a string", "an integer", ... for error messages.
std::string_view kind_of(const json::value& v);
// A user-given string for an error message: at most 40 bytes, cut on a character boundary.
std::string short_quote(std::string_view s);
// The field's value, or nullptr when it is absent or null (both mean "not given").
const json::value* field(const json::object& obj, std::string_view key);
Status wrong_type(std::string_view path, std::string_view expected, const json::value& v);
// A JSON integer, or a number with no fractional part (4.0), as int64.
Result<int64_t> integer_of(const json::value& v, std::string_view path);
Result<std::optional<int64_t>> opt_integer(const json::object& obj, std::string_view key);
// An integer field within [lo, hi]; nullopt when not given.
Result<std::optional<int64_t>> opt_integer_in(const json::object& obj, std::string_view key, int64_t lo, int64_t hi);
// A finite number; nullopt when not given.
Result<std::optional<double>> opt_number(const json::object& obj, std::string_view key);
// A sampling parameter: a number inside its range (common/sampling_params.h), stored into
// `out` when given.
Status read_float(const json::object& obj, const SamplingRange& range, float& out);
Status read_bool(const json::object& obj, std::string_view key, bool& out);
Result<std::optional<std::string>> opt_string(const json::object& obj, std::string_view key);
// A list of token ids: every element an integer in [0, int32 max].
Result<std::vector<int32_t>> token_ids_of(const json::array& arr, std::string_view path);
bool is_number(const json::value& v);
// 1 to 64 letters, digits, _ or -.
bool is_tool_name(std::string_view name);

// The parts of api_parse_request in openai_structured.cpp.
// response_format and vLLM's guided_* fields: at most one constraint.
Status parse_constraint(const json::object& obj, ApiRequest& req);
// tools, tool_choice, parallel_tool_calls.
Status parse_tools(const json::object& obj, ApiRequest& req);
// kUnsupported: "WHAT is not supported: WHY".
Status unsupported(std::string_view what, std::string_view why);
// A key no schema of `route` ("/v1/embeddings") has: noted in `ignored` with
// options.lenient_fields, else kInvalidArgument naming it (plain names as given, others
// quoted) and the flag that would accept it.
Status unknown_field_of(std::string_view name, std::string_view route, const ApiParseOptions& options,
                        std::vector<std::string>& ignored);
// Every key of `obj` is one of `allowed`; else "unknown field PATH.KEY".
Status only_keys(const json::object& obj, std::string_view path, std::initializer_list<std::string_view> allowed);
// A tool given flat ({name, description, SCHEMA_KEY: {...}}, as the Responses and
// Messages APIs give them) at `at`: its name and schema checked, its definition in the
// OpenAI shape chat templates read. `schema_required`: the schema must be there.
Result<ApiTool> flat_function_tool(const json::object& o, const std::string& at, std::string_view schema_key,
                                   bool schema_required);
// A tool_choice that forces a call names a tool `tools` defines.
Status tool_choice_check(const ApiRequest& req);
// A forced tool call and an output constraint are not asked for together.
Status tool_choice_constraint_check(const ApiRequest& req);
// Adds a tool unless one of its name is there.
Status add_tool(ApiRequest& req, ApiTool tool);
// At most one output constraint per request.
Status set_constraint(ApiRequest& req, ApiConstraint c);
// logit_bias, suffix, best_of, min_tokens, stop_token_ids.
Status parse_sampling_extras(const json::object& obj, ApiRequest& req);

// Whether `name` is a top-level field of the Responses API (responses.cpp).
bool responses_is_field(std::string_view name);

// The request field an error message begins with ("temperature must ...",
// "messages[2].role ...", "unknown field NAME"), or "" when it begins with anything else.
std::string_view error_param(std::string_view message);

}  // namespace hearth::request_json
