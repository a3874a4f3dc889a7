#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include "grammar/matcher.h"
#include "tests/json_schema_check.h"
#include "tests/unit/grammar/grammar_test_util.h"

namespace hearth::grammar {
namespace {

namespace json = boost::json;
using testing::byte_vocabulary;
using testing::compile;
using testing::full_match;

// Tokens a JSON-writing model has besides single bytes.
const std::vector<std::string> kJsonTokens = {"{\"", "\":", "\": ", "\",", "\", \"", "true", "false", "null", "12",
                                              "2024", "-0", ".5", "e+", "abc", "name", " ", "\n  ", "é", "\\\"", "[{",
                                              "}]", "},", "\\u00e9", "ü", "\xF0\x9F", "\x98\x80", "--", "::"};

std::shared_ptr<CompiledGrammar> schema_grammar(const json::value& schema,
                                                std::shared_ptr<const Vocabulary> vocab = byte_vocabulary(kJsonTokens)) {
  auto gbnf = json_schema_to_gbnf(schema);
  EXPECT_TRUE(gbnf.is_ok()) << json::serialize(schema) << ": " << gbnf.status().message();
  if (!gbnf.is_ok()) return nullptr;
  auto g = compile(*gbnf, std::move(vocab));
  EXPECT_NE(g, nullptr) << *gbnf;
  return g;
}

// 100 random schemas; random walks through each always give JSON valid against it.
TEST(JsonSchemaTest, RandomSchemasGiveOnlyValidDocuments) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  hearth::testing::SchemaGenerator gen(seed);
  std::mt19937_64 rng(seed);
  const auto vocab = byte_vocabulary(kJsonTokens);
  int outputs = 0;
  for (int i = 0; i < 100; ++i) {
    const json::value schema = gen.schema();
    const auto g = schema_grammar(schema, vocab);
    ASSERT_NE(g, nullptr);
    for (int k = 0; k < 4; ++k) {
      const auto w = testing::random_walk(g, rng, 300, 0.3);
      ASSERT_TRUE(w.error.is_ok()) << json::serialize(schema) << ": " << w.error.message();
      ASSERT_TRUE(w.ended) << json::serialize(schema) << "\nafter: " << w.text;
      boost::system::error_code ec;
      const json::value doc = json::parse(w.text, ec);
      ASSERT_FALSE(ec) << json::serialize(schema) << "\nnot JSON: " << w.text;
      const std::string why = hearth::testing::why_invalid(doc, schema, schema);
      ASSERT_TRUE(why.empty()) << json::serialize(schema) << "\n" << w.text << "\n" << why;
      ++outputs;
    }
  }
  EXPECT_EQ(outputs, 400);
}

TEST(JsonSchemaTest, PropertiesFollowTheSchemaRequiredOnesAlways) {
  const auto g = schema_grammar(json::parse(R"({"type": "object", "properties": {
      "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"]})"));
  for (const char* ok : {R"({"b": "x"})", R"({"a": 1, "b": "x"})", R"({"a": 1,"b":"", "c": true})",
                         "{\n  \"b\": \"x\",\n  \"c\": false\n}", R"({"b":"x","c":true})"}) {
    EXPECT_TRUE(full_match(g, ok)) << ok;
  }
  for (const char* bad : {R"({})", R"({"a": 1})", R"({"b": "x", "a": 1})", R"({"b": "x", "d": 1})",
                          R"({"b": "x",})", R"({, "b": "x"})", R"({"b": "x"}  )", "{    \"b\": \"x\"}"}) {
    EXPECT_FALSE(full_match(g, bad)) << bad;
  }
}

TEST(JsonSchemaTest, ArraysCountTheirItems) {
  const auto g = schema_grammar(json::parse(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})"));
  EXPECT_FALSE(full_match(g, "[1]"));
  EXPECT_TRUE(full_match(g, "[1,2]"));
  EXPECT_TRUE(full_match(g, "[1, 2, 3]"));
  EXPECT_FALSE(full_match(g, "[1,2,3,4]"));
  const auto tuple = schema_grammar(json::parse(R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}], "items": false})"));
  EXPECT_TRUE(full_match(tuple, R"(["a", null])"));
  EXPECT_FALSE(full_match(tuple, R"(["a"])"));
  EXPECT_FALSE(full_match(tuple, R"(["a", null, 1])"));
  const auto any = schema_grammar(json::parse(R"({"type": "array"})"));
  EXPECT_TRUE(full_match(any, R"([])"));
  EXPECT_TRUE(full_match(any, R"([1, "a", {"b": [null]}])"));
}

TEST(JsonSchemaTest, StringsHonourLengthsFormatsAndEscapes) {
  const auto len = schema_grammar(json::parse(R"({"type": "string", "minLength": 2, "maxLength": 3})"));
  EXPECT_FALSE(full_match(len, R"("a")"));
  EXPECT_TRUE(full_match(len, R"("ab")"));
  EXPECT_TRUE(full_match(len, R"("é\n😀")"));  // three characters, one escaped
  EXPECT_FALSE(full_match(len, R"("abcd")"));
  const auto any = schema_grammar(json::parse(R"({"type": "string"})"));
  EXPECT_TRUE(full_match(any, R"("a\"b\\c\u00e9\/")"));
  EXPECT_FALSE(full_match(any, "\"a\nb\""));  // a raw control character
  EXPECT_FALSE(full_match(any, R"("\ud800")"));  // a lone surrogate escape
  EXPECT_FALSE(full_match(any, R"("\x")"));
  const auto date = schema_grammar(json::parse(R"({"type": "string", "format": "date-time"})"));
  EXPECT_TRUE(full_match(date, R"("2024-02-29T23:59:60Z")") == false);
  EXPECT_TRUE(full_match(date, R"("2024-02-29T23:59:59.123+05:30")"));
  EXPECT_FALSE(full_match(date, R"("2024-04-31T00:00:00Z")"));
  EXPECT_FALSE(full_match(date, R"("2024-13-01T00:00:00Z")"));
}

TEST(JsonSchemaTest, NumbersStayInsideWholeNumberBounds) {
  const auto g = schema_grammar(json::parse(R"({"type": "number", "exclusiveMinimum": 0, "maximum": 10})"));
  for (const char* ok : {"0.5", "10", "10.000", "9.99", "1", "0.001"}) EXPECT_TRUE(full_match(g, ok)) << ok;
  for (const char* bad : {"0", "0.0", "-1", "10.5", "11", "-0.5", "1e3"}) EXPECT_FALSE(full_match(g, bad)) << bad;
  const auto neg = schema_grammar(json::parse(R"({"type": "number", "minimum": -3, "exclusiveMaximum": -1})"));
  for (const char* ok : {"-3", "-2.5", "-1.01", "-3.0"}) EXPECT_TRUE(full_match(neg, ok)) << ok;
  for (const char* bad : {"-1", "-3.5", "0", "-0.5", "-1.0"}) EXPECT_FALSE(full_match(neg, bad)) << bad;
  const auto free = schema_grammar(json::parse(R"({"type": "number"})"));
  for (const char* ok : {"0", "-0", "1.5e+10", "123456789012345", "2E-7"}) EXPECT_TRUE(full_match(free, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "1234567890123456", "1e100", "+1"}) EXPECT_FALSE(full_match(free, bad)) << bad;
}

TEST(JsonSchemaTest, BoundsBeyondFifteenDigitsBindNothing) {
  // zod's int(): +-(2^53 - 1), beyond every number the grammar writes.
  const auto g = schema_grammar(json::parse(
      R"({"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991})"));
  EXPECT_TRUE(full_match(g, "-42"));
  EXPECT_TRUE(full_match(g, "999999999999999"));
  auto far = json_schema_to_gbnf(json::parse(R"({"type": "integer", "minimum": 9007199254740991})"));
  EXPECT_EQ(far.status().code(), ErrorCode::kUnsupported);
}

TEST(JsonSchemaTest, RefsResolveAndMayRecurse) {
  const auto g = schema_grammar(json::parse(R"({"$defs": {"node": {"type": "object", "properties": {
      "v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
      "required": ["v", "next"], "additionalProperties": false}}, "$ref": "#/$defs/node"})"));
  EXPECT_TRUE(full_match(g, R"({"v": 1, "next": {"v": 2, "next": null}})"));
  EXPECT_FALSE(full_match(g, R"({"v": 1, "next": {"v": 2}})"));
}

TEST(JsonSchemaTest, EmptySchemaAndTrueMeanAnyValueAndEndInBudget) {
  std::mt19937_64 rng(11);
  for (const char* schema : {"{}", "true"}) {
    const auto g = schema_grammar(json::parse(schema));
    EXPECT_TRUE(full_match(g, R"({"a": [1, 2.5, "x", null, true]})"));
    EXPECT_TRUE(full_match(g, "3"));
    for (int i = 0; i < 50; ++i) {
      const auto w = testing::random_walk(g, rng, 16);
      ASSERT_TRUE(w.ended) << w.text;
      EXPECT_NO_THROW(json::parse(w.text)) << w.text;
    }
  }
}

TEST(JsonSchemaTest, UnsupportedKeywordsAreNamedWithTheirPlace) {
  struct Case {
    const char* schema;
    const char* names;
    ErrorCode code;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}}})",
            "schema.properties.a.contentEncoding", ErrorCode::kUnsupported},
           {R"({"type": "array", "uniqueItems": true})", "uniqueItems", ErrorCode::kUnsupported},
           {R"({"type": "number", "minimum": 0.5})", "whole numbers", ErrorCode::kUnsupported},
           {R"({"type": "string", "format": "hostname"})", "format \"hostname\"", ErrorCode::kUnsupported},
           {R"({"type": "string", "pattern": "(a)\\1"})", "backreference", ErrorCode::kUnsupported},
           {R"({"allOf": [{"type": "string"}, {"minLength": 2}]})", "allOf", ErrorCode::kUnsupported},
           {R"({"$ref": "http://example.com/s.json"})", "$ref", ErrorCode::kUnsupported},
           {R"({"$ref": "#/$defs/missing"})", "points at nothing", ErrorCode::kInvalidArgument},
           {R"({"type": "strung"})", "not a JSON type", ErrorCode::kInvalidArgument},
           {R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer", ErrorCode::kInvalidArgument},
           {R"(false)", "matches nothing", ErrorCode::kInvalidArgument},
           {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "\"b\"", ErrorCode::kInvalidArgument},
           {R"({"enum": []})", "enum", ErrorCode::kInvalidArgument},
           {R"([1])", "must be an object", ErrorCode::kInvalidArgument},
       }) {
    auto g = json_schema_to_gbnf(json::parse(c.schema));
    ASSERT_FALSE(g.is_ok()) << c.schema;
    EXPECT_EQ(g.status().code(), c.code) << c.schema << ": " << g.status().message();
    EXPECT_NE(g.status().message().find(c.names), std::string::npos) << c.schema << ": " << g.status().message();
  }
  // Deep nesting is refused, not recursed into without end.
  json::value deep = json::object{{"type", "string"}};
  for (int i = 0; i < 100; ++i) deep = json::object{{"type", "array"}, {"items", deep}};
  auto g = json_schema_to_gbnf(deep);
  ASSERT_FALSE(g.is_ok());
  EXPECT_NE(g.status().message().find("deeper"), std::string::npos);
}

}  // namespace
}  // namespace hearth::grammar
