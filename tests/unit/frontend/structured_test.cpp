// The grammars the frontend sends with a request: forced tool calls written in each
// template family's format parse back into the same calls, constraints too large or not
// writable by the vocabulary are 400s naming the field.
#include "frontend/structured.h"

#include <random>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "tests/json_schema_check.h"
#include "tests/unit/grammar/grammar_test_util.h"

namespace hearth {
namespace {

namespace json = boost::json;

ApiRequest chat(std::string_view extra) {
  const std::string body = std::string(R"({"messages": [{"role": "user", "content": "x"}], )") + std::string(extra) + "}";
  auto r = api_parse_request(body, ApiEndpoint::kChatCompletions);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return std::move(r).value();
}

grammar::ByteSet all_bytes() {
  grammar::ByteSet b;
  b.set_range(0, 255);
  return b;
}

constexpr std::string_view kTools = R"("tools": [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
     "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
     "required": ["city"]}}},
    {"type": "function", "function": {"name": "now"}}])";

// Random outputs of each format's forced-call grammar parse, streamed or not, into calls
// of the requested tools with valid arguments.
TEST(StructuredGrammarTest, ForcedCallsParseBackInEveryFormat) {
  std::mt19937_64 rng(std::random_device{}());
  const auto vocab = grammar::testing::byte_vocabulary({"{\"", "\": ", "<tool_call>", "</tool_call>", "get_weather"});
  const json::value params = json::parse(R"({"type": "object", "properties": {"city": {"type": "string",
      "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"]})");
  for (ToolCallFormat format : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3Json, ToolCallFormat::kMistral}) {
    for (const std::string choice : {R"("required")", R"({"type": "function", "function": {"name": "now"}})"}) {
      for (const bool parallel : {true, false}) {
        const ApiRequest r = chat(std::string(kTools) + R"(, "tool_choice": )" + choice +
                                  R"(, "parallel_tool_calls": )" + (parallel ? "true" : "false"));
        auto gbnf = request_grammar(r, format, all_bytes(), 1 << 20);
        ASSERT_TRUE(gbnf.is_ok()) << gbnf.status().message();
        const auto g = grammar::testing::compile(*gbnf, vocab);
        ASSERT_NE(g, nullptr) << *gbnf;
        for (int i = 0; i < 20; ++i) {
          const auto w = grammar::testing::random_walk(g, rng, 400, 0.2);
          ASSERT_TRUE(w.ended) << w.text;
          ToolCallParser parser(format);
          std::vector<ToolCall> calls;
          std::string content = parser.push(w.text, calls);
          content += parser.finish(calls);
          EXPECT_EQ(content, "") << tool_call_format_name(format) << ": " << w.text;
          ASSERT_GE(calls.size(), 1u) << w.text;
          if (!parallel || r.tool_choice == ApiToolChoice::kNamed) {
            EXPECT_EQ(calls.size(), 1u) << w.text;
          }
          for (const ToolCall& c : calls) {
            if (r.tool_choice == ApiToolChoice::kNamed) {
              EXPECT_EQ(c.name, "now");
            }
            const json::value args = json::parse(c.arguments);
            if (c.name == "get_weather") {
              EXPECT_EQ(testing::why_invalid(args, params, params), "") << c.arguments;
            } else {
              EXPECT_EQ(args, json::object{}) << c.arguments;
            }
          }
        }
      }
    }
  }
}

TEST(StructuredGrammarTest, NothingToConstrainGivesNoGrammar) {
  EXPECT_EQ(*request_grammar(chat(R"("max_tokens": 3)"), ToolCallFormat::kHermes, all_bytes(), 100), "");
  EXPECT_EQ(*request_grammar(chat(std::string(kTools)), ToolCallFormat::kHermes, all_bytes(), 100), "");  // auto
}

TEST(StructuredGrammarTest, TooLargeUnwritableOrFormatlessConstraintsAreNamed) {
  const ApiRequest r = chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x",
      "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}})");
  auto big = request_grammar(r, ToolCallFormat::kNone, all_bytes(), 64);
  ASSERT_FALSE(big.is_ok());
  EXPECT_TRUE(big.status().message().starts_with("response_format")) << big.status().message();
  grammar::ByteSet letters;
  letters.set_range('a', 'z');  // no braces or quotes
  auto unwritable = request_grammar(r, ToolCallFormat::kNone, letters, 1 << 20);
  ASSERT_FALSE(unwritable.is_ok());
  EXPECT_NE(unwritable.status().message().find("vocabulary cannot write"), std::string::npos);
  auto no_format = request_grammar(chat(std::string(kTools) + R"(, "tool_choice": "required")"), ToolCallFormat::kNone,
                                   all_bytes(), 1 << 20);
  ASSERT_FALSE(no_format.is_ok());
  EXPECT_TRUE(no_format.status().message().starts_with("tool_choice")) << no_format.status().message();
}

}  // namespace
}  // namespace hearth
