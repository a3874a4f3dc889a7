// JSON Schema to GBNF: a grammar whose every match is a JSON document valid against the
// schema (grammar/README.md lists the keywords).
//
// Supported: type (one or a list), properties / required (properties in the schema's
// order; required ones always present, the others optional), additionalProperties (a
// schema or true for an object without `properties`: a map; with `properties`, only
// the listed ones are generated, which every value of the schema allows), items /
// prefixItems / minItems / maxItems, enum, const, anyOf / oneOf (as alternatives; a
// oneOf whose branches overlap may yield a value more than one matches), allOf of one
// schema, $ref into #/$defs, #/definitions or # (recursion allowed), string minLength /
// maxLength / pattern / format (date, time, date-time, uuid, email, ipv4), integer
// minimum / maximum / exclusiveMinimum / exclusiveMaximum (exact digit ranges), the same
// for number with whole-number bounds, multipleOf 1 on integers, nullable (OpenAPI).
// Annotations (title, description, default, examples, $schema, $id, $comment,
// deprecated, readOnly, writeOnly) are ignored. Anything else is refused with
// kUnsupported naming the keyword and where it is ("properties.age.multipleOf").
//
// Bounded by construction: numbers have at most 15 integer and 15 fraction digits and a
// 3-digit exponent, whitespace between tokens is at most one space or one newline with
// up to 20 spaces or tabs of indentation, so no run of digits or whitespace is endless.
//
// Pure; thread-safe.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"

namespace hearth::grammar {

struct JsonSchemaOptions {
  bool whitespace = true;     // allow the bounded whitespace above (else compact JSON only)
  size_t max_depth = 64;      // nesting of schemas
  size_t max_rules = 20000;   // rules of the grammar
};

// Builds one grammar from several schemas (a tool call's arguments per tool, say).
class JsonGrammarBuilder {
 public:
  explicit JsonGrammarBuilder(const JsonSchemaOptions& options = {});

  // Adds the rules for `schema` and returns the name of the rule that matches a JSON value
  // valid against it. `name` prefixes its rules' names; refs resolve within `schema`.
  Result<std::string> add_schema(const boost::json::value& schema, std::string_view name);
  // The rule matching any JSON value ("any" below any JSON object).
  std::string any_value();
  std::string any_object();
  // A rule of the caller's: `name ::= body`.
  void add_rule(const std::string& name, std::string body);
  // The whole grammar: `root ::= root_body`, then every rule added.
  std::string gbnf(std::string_view root_body) const;

 private:
  struct Visit;
  std::string unique_name(std::string_view hint);
  std::string primitive(std::string_view name);
  Result<std::string> visit(const boost::json::value& schema, const std::string& name, const std::string& path,
                            size_t depth, Visit& ctx);
  Result<std::string> visit_ref(const std::string& ref, const std::string& path, size_t depth, Visit& ctx);
  Result<std::string> visit_type(const boost::json::object& s, std::string_view type, const std::string& name,
                                 const std::string& path, size_t depth, Visit& ctx);
  Result<std::string> object_rule(const boost::json::object& s, const std::string& name, const std::string& path,
                                  size_t depth, Visit& ctx);
  Result<std::string> array_rule(const boost::json::object& s, const std::string& name, const std::string& path,
                                 size_t depth, Visit& ctx);
  Result<std::string> string_rule(const boost::json::object& s, const std::string& name, const std::string& path);
  Result<std::string> number_rule(const boost::json::object& s, bool integer, const std::string& name,
                                  const std::string& path);

  JsonSchemaOptions options_;
  std::map<std::string, std::string> rules_;  // name -> body
  std::vector<std::string> order_;            // names in the order added
};

// A grammar for JSON valid against `schema` (a schema object or a boolean).
Result<std::string> json_schema_to_gbnf(const boost::json::value& schema, const JsonSchemaOptions& options = {});

// The GBNF alternatives for integers in [lo, hi] (inclusive, both within ±10^15),
// without leading zeros: exposed for tests.
std::string integer_range_gbnf(int64_t lo, int64_t hi);

}  // namespace hearth::grammar
