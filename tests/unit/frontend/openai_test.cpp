// OpenAI request parsing (every field's valid and invalid forms), error bodies and the
// response and stream formats, checked by parsing them back as JSON.
#include "frontend/openai.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace hearth {
namespace {

namespace json = boost::json;

Result<ApiRequest> completion(const std::string& extra) {
  return api_parse_request(R"({"prompt": "hi")" + (extra.empty() ? "" : ", " + extra) + "}",
                           ApiEndpoint::kCompletions);
}

Result<ApiRequest> chat(const std::string& extra) {
  return api_parse_request(
      R"({"messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}",
      ApiEndpoint::kChatCompletions);
}

// The error body of `status`, parsed.
json::object error_of(const Status& status) {
  const json::value v = json::parse(api_error_body(status));
  return v.as_object().at("error").as_object();
}

// A 400 whose message and `param` name `param`.
::testing::AssertionResult rejected(const Result<ApiRequest>& r, std::string_view param) {
  if (r.is_ok()) return ::testing::AssertionFailure() << "accepted";
  const Status& s = r.status();
  if (api_status_of(s) != 400) {
    return ::testing::AssertionFailure() << "status " << api_status_of(s) << ": " << s.message();
  }
  if (s.message().find(param) == std::string::npos) {
    return ::testing::AssertionFailure() << "message does not name " << param << ": " << s.message();
  }
  const json::object err = error_of(s);
  if (err.at("type") != "invalid_request_error") return ::testing::AssertionFailure() << "type " << err.at("type");
  if (!err.at("param").is_string() || err.at("param").as_string() != param) {
    return ::testing::AssertionFailure() << "param " << json::serialize(err.at("param")) << " for " << s.message();
  }
  return ::testing::AssertionSuccess() << s.message();
}

// ---- requests -----------------------------------------------------------------------

TEST(ApiParse, CompletionDefaults) {
  auto r = completion("");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->endpoint, ApiEndpoint::kCompletions);
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_TRUE(r->prompt_tokens.empty());
  EXPECT_EQ(r->model, "");
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->sampling.top_p, 1.0f);
  EXPECT_EQ(r->sampling.top_k, 0);
  EXPECT_EQ(r->sampling.min_p, 0.0f);
  EXPECT_EQ(r->sampling.repetition_penalty, 1.0f);
  EXPECT_FALSE(r->seed.has_value());
  EXPECT_TRUE(r->stop.empty());
  EXPECT_EQ(r->n, 1);
  EXPECT_FALSE(r->stream);
  EXPECT_FALSE(r->include_usage);
  EXPECT_FALSE(r->echo);
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_FALSE(r->ignore_eos);
  EXPECT_FALSE(r->user.has_value());
}

TEST(ApiParse, EveryFieldAtOnce) {
  auto r = completion(
      R"("model": "stories", "max_tokens": 32, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": 7,
         "stop": ["\n", "The end"], "n": 3, "stream": true, "stream_options": {"include_usage": true},
         "echo": true, "logprobs": 2, "ignore_eos": true, "user": "u-1")");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->model, "stories");
  EXPECT_EQ(r->max_tokens, 32);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r->sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r->seed, 7u);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"\n", "The end"}));
  EXPECT_EQ(r->n, 3);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->echo);
  EXPECT_EQ(r->logprobs, 2);
  EXPECT_TRUE(r->ignore_eos);
  EXPECT_EQ(r->user, "u-1");
}

TEST(ApiParse, NullMeansNotGiven) {
  auto r = completion(
      R"("model": null, "max_tokens": null, "temperature": null, "top_p": null, "top_k": null, "seed": null,
         "stop": null, "n": null, "stream": null, "stream_options": null, "echo": null, "logprobs": null,
         "user": null, "ignore_eos": null)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->logprobs, -1);
  EXPECT_FALSE(r->max_tokens.has_value());
  EXPECT_FALSE(r->seed.has_value());
}

TEST(ApiParse, UnknownFieldsAreRefusedUnlessLenient) {
  EXPECT_TRUE(rejected(completion(R"("Temperature": "hot")"), "Temperature"));
  const Status unknown = chat(R"("frobnicate": 1)").status();
  EXPECT_EQ(unknown.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("/v1/chat/completions"), std::string::npos) << unknown.message();
  EXPECT_NE(unknown.message().find("--lenient-fields"), std::string::npos) << unknown.message();
  EXPECT_TRUE(rejected(chat(R"("frobnicate": 1)"), "frobnicate"));
  // Each endpoint's own fields: another endpoint's are unknown there.
  EXPECT_TRUE(rejected(chat(R"("prompt": "x")"), "prompt"));
  EXPECT_TRUE(rejected(completion(R"("messages": [])"), "messages"));
  EXPECT_TRUE(rejected(completion(R"("top_logprobs": 2)"), "top_logprobs"));
  EXPECT_TRUE(rejected(completion(R"("max_completion_tokens": 2)"), "max_completion_tokens"));
  EXPECT_TRUE(rejected(chat(R"("best_of": 1)"), "best_of"));
  // Nested objects too.
  EXPECT_TRUE(rejected(completion(R"("stream": true, "stream_options": {"include_usage": true, "x": 1})"),
                       "stream_options.x"));
  EXPECT_TRUE(rejected(chat(R"("messages": [{"role": "user", "content": "hi", "mood": "calm"}])"), "messages[0].mood"));
  // A name that is not an identifier is quoted in the message.
  EXPECT_FALSE(chat(R"("a b": 1)").is_ok());

  const ApiParseOptions lenient{.lenient_fields = true};
  auto r = api_parse_request(
      R"({"messages": [{"role": "user", "content": "hi", "mood": "calm"}], "Temperature": "hot", "x": {"y": 1},
          "stream": true, "stream_options": {"extra": true}})",
      ApiEndpoint::kChatCompletions, lenient);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->sampling.temperature, 1.0f);
  EXPECT_EQ(r->ignored_fields,
            (std::vector<std::string>{"Temperature", "x", "stream_options.extra", "messages[0].mood"}));
  // Lenient or not, a field of the schema that hearth does not implement is refused.
  EXPECT_TRUE(rejected(api_parse_request(R"({"messages": [{"role": "user", "content": "hi"}], "store": true})",
                                         ApiEndpoint::kChatCompletions, lenient),
                       "store"));
}

// Every field of the OpenAI schemas that hearth does not implement: refused by name with
// "unsupported_value", except where its value asks for nothing.
TEST(ApiParse, UnimplementedSchemaFieldsAreRefusedByName) {
  struct Case {
    bool chat;
    const char* fields;
    const char* param;
  };
  for (const Case& c : {
           Case{true, R"("functions": [{"name": "f"}])", "functions"},
           Case{true, R"("function_call": "auto")", "function_call"},
           Case{true, R"("store": true)", "store"},
           Case{true, R"("service_tier": "flex")", "service_tier"},
           Case{true, R"("modalities": ["text", "audio"])", "modalities"},
           Case{true, R"("audio": {"voice": "alloy", "format": "wav"})", "audio"},
           Case{true, R"("prediction": {"type": "content", "content": "x"})", "prediction"},
           Case{true, R"("reasoning_effort": "low")", "reasoning_effort"},
           Case{true, R"("verbosity": "low")", "verbosity"},
           Case{true, R"("web_search_options": {})", "web_search_options"},
           Case{true, R"("messages": [{"role": "user", "content": "hi", "refusal": "no"}])", "messages[0].refusal"},
           Case{true, R"("tools": [{"type": "code_interpreter"}])", "tools[0].type"},
       }) {
    const auto r = c.chat ? chat(c.fields) : completion(c.fields);
    EXPECT_TRUE(rejected(r, c.param)) << c.fields;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported) << c.fields;
      EXPECT_EQ(error_of(r.status()).at("code"), "unsupported_value") << c.fields;
      EXPECT_NE(r.status().message().find("not supported"), std::string::npos) << r.status().message();
    }
  }
  // Wrong types are named as for any field.
  EXPECT_TRUE(rejected(chat(R"("tools": {})"), "tools"));
  EXPECT_TRUE(rejected(chat(R"("store": "yes")"), "store"));
  EXPECT_TRUE(rejected(chat(R"("parallel_tool_calls": 1)"), "parallel_tool_calls"));
  EXPECT_TRUE(rejected(completion(R"("best_of": 1.5)"), "best_of"));
  EXPECT_TRUE(rejected(chat(R"("response_format": "json")"), "response_format"));
}

// The fields hearth implements parse into the request as the OpenAI docs say.
TEST(ApiParse, StructuredOutputToolsAndSamplingExtrasParse) {
  auto r = chat(R"("response_format": {"type": "json_schema", "json_schema": {"name": "p", "strict": true,
      "schema": {"type": "object", "properties": {"a": {"type": "integer"}}}}})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_TRUE(r->constraint.has_value());
  EXPECT_EQ(r->constraint->kind, ApiConstraint::Kind::kJsonSchema);
  EXPECT_EQ(r->constraint->schema.at("type"), "object");
  r = chat(R"("response_format": {"type": "json_object"})");
  EXPECT_EQ(r->constraint->kind, ApiConstraint::Kind::kJsonObject);
  r = completion(R"("guided_json": "{\"type\": \"string\"}")");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->constraint->schema.at("type"), "string");
  r = completion(R"("guided_regex": "[a-z]+")");
  EXPECT_EQ(r->constraint->kind, ApiConstraint::Kind::kRegex);
  r = completion(R"("guided_choice": ["yes", "no"])");
  EXPECT_EQ(r->constraint->choices, (std::vector<std::string>{"yes", "no"}));
  r = completion(R"("guided_grammar": "root ::= \"x\"")");
  EXPECT_EQ(r->constraint->kind, ApiConstraint::Kind::kGrammar);

  r = chat(R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object"}}}, {"type": "function", "function": {"name": "noargs"}}],
      "tool_choice": {"type": "function", "function": {"name": "noargs"}}, "parallel_tool_calls": false)");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->tools.size(), 2u);
  EXPECT_EQ(r->tools[0].name, "get_weather");
  EXPECT_TRUE(r->tools[1].parameters.is_null());
  EXPECT_EQ(r->tool_choice, ApiToolChoice::kNamed);
  EXPECT_EQ(r->tool_choice_name, "noargs");
  EXPECT_FALSE(r->parallel_tool_calls);
  r = chat(R"("tools": [{"type": "function", "function": {"name": "f"}}])");
  EXPECT_EQ(r->tool_choice, ApiToolChoice::kAuto);
  r = chat(R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required")");
  EXPECT_EQ(r->tool_choice, ApiToolChoice::kRequired);

  r = chat(R"("messages": [{"role": "user", "content": "w?", "name": "ann"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
       "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "content": "ok", "tool_call_id": "c1"}])");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->messages[0].extra.at("name"), "ann");
  EXPECT_EQ(r->messages[1].extra.at("tool_calls").at(0).at("function").at("arguments").at("x"), 1);
  EXPECT_EQ(r->messages[2].extra.at("tool_call_id"), "c1");

  r = completion(R"("logit_bias": {"50256": -100, "7": 2.5}, "suffix": " end", "n": 2, "best_of": 3,
      "min_tokens": 4, "max_tokens": 9, "stop_token_ids": [13, 2])");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->logit_bias.size(), 2u);
  EXPECT_EQ(r->logit_bias[0].id, 50256);
  EXPECT_EQ(r->logit_bias[0].bias, -100.0f);
  EXPECT_EQ(r->suffix, " end");
  EXPECT_EQ(r->best_of, 3);
  EXPECT_EQ(r->min_tokens, 4);
  EXPECT_EQ(r->stop_token_ids, (std::vector<int32_t>{13, 2}));
  r = chat(R"("stream": true, "stream_options": {"include_usage": true, "continuous_usage_stats": true})");
  EXPECT_TRUE(r->continuous_usage_stats);
}

// Bad values of those fields: a 400 naming the field.
TEST(ApiParse, BadStructuredOutputToolsAndExtrasAreNamed) {
  struct Case {
    bool chat;
    const char* fields;
    const char* param;
  };
  for (const Case& c : {
           Case{true, R"("response_format": {"type": "xml"})", "response_format.type"},
           Case{true, R"("response_format": {"type": "json_schema"})", "response_format.json_schema"},
           Case{true, R"("response_format": {"type": "json_schema", "json_schema": {"schema": 3}})",
                "response_format.json_schema.schema"},
           Case{true, R"("response_format": {"type": "json_object", "schema": {}})", "response_format.schema"},
           Case{false, R"("guided_json": "{not json")", "guided_json"},
           Case{false, R"("guided_choice": [])", "guided_choice"},
           Case{false, R"("guided_regex": 5)", "guided_regex"},
           Case{false, R"("guided_regex": "a", "guided_choice": ["a"])", "guided_choice"},
           Case{true, R"("tools": [{"type": "function", "function": {"name": "bad name"}}])", "tools[0].function.name"},
           Case{true, R"("tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}])",
                "tools"},
           Case{true, R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}})",
                "tool_choice"},
           Case{true, R"("tool_choice": "required")", "tool_choice"},
           Case{true, R"("tool_choice": "sometimes")", "tool_choice"},
           Case{true, R"("tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
                "response_format": {"type": "json_object"})", "tool_choice"},
           Case{false, R"("logit_bias": {"abc": 1})", "logit_bias"},
           Case{false, R"("logit_bias": {"5": 101})", "logit_bias"},
           Case{false, R"("logit_bias": {"5": "high"})", "logit_bias[\"5\"]"},
           Case{false, R"("n": 3, "best_of": 2)", "best_of"},
           Case{false, R"("best_of": 2, "stream": true)", "best_of"},
           Case{false, R"("best_of": 99)", "best_of"},
           Case{false, R"("min_tokens": 10, "max_tokens": 5)", "min_tokens"},
           Case{false, R"("min_tokens": -1)", "min_tokens"},
           Case{false, R"("stop_token_ids": [1, -2])", "stop_token_ids[1]"},
           Case{false, R"("suffix": 3)", "suffix"},
           Case{true, R"("messages": [{"role": "user", "content": "x", "tool_calls": []}])", "messages[0].tool_calls"},
           Case{true, R"("messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[1]"}}]}])",
                "messages[0].tool_calls[0].function.arguments"},
           Case{true, R"("messages": [{"role": "user", "content": "x", "tool_call_id": "c"}])", "messages[0].tool_call_id"},
           Case{true, R"("stream": true, "stream_options": {"continuous_usage_stats": "yes"})",
                "stream_options.continuous_usage_stats"},
       }) {
    const auto r = c.chat ? chat(c.fields) : completion(c.fields);
    EXPECT_TRUE(rejected(r, c.param)) << c.fields << ": " << r.status().message();
  }
}

TEST(ApiParse, SchemaFieldsThatAskForNothingAreAccepted) {
  for (const char* fields :
       {R"("response_format": {"type": "text"})", R"("tools": [])", R"("tool_choice": "none")",
        R"("parallel_tool_calls": false)", R"("functions": [])", R"("function_call": "none")",
        R"("logit_bias": {})", R"("store": false)", R"("metadata": {"team": "a"})", R"("service_tier": "auto")",
        R"("service_tier": "default")", R"("modalities": ["text"])", R"("user": "u")", R"("safety_identifier": "s")",
        R"("prompt_cache_key": "k")", R"("response_format": null, "tools": null, "audio": null)",
        R"("stream": true, "stream_options": {"include_usage": false, "continuous_usage_stats": null})",
        R"("messages": [{"role": "assistant", "content": "a", "tool_calls": null, "name": null}, {"role": "user", "content": "b"}])"}) {
    const auto r = chat(fields);
    EXPECT_TRUE(r.is_ok()) << fields << ": " << r.status().to_string();
  }
  for (const char* fields : {R"("suffix": "")", R"("best_of": 1)", R"("n": 3, "best_of": 3)", R"("logit_bias": {})",
                             R"("best_of": null, "suffix": null, "logit_bias": null)"}) {
    const auto r = completion(fields);
    EXPECT_TRUE(r.is_ok()) << fields << ": " << r.status().to_string();
  }
}

TEST(ApiParse, PromptShapes) {
  auto r = api_parse_request(R"({"prompt": ["one prompt"]})", ApiEndpoint::kCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt, "one prompt");
  r = api_parse_request(R"({"prompt": [1, 403, 407]})", ApiEndpoint::kCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_FALSE(r->prompt.has_value());
  EXPECT_EQ(r->prompt_tokens, (std::vector<int32_t>{1, 403, 407}));
  r = api_parse_request(R"({"prompt": [[1, 2147483647]]})", ApiEndpoint::kCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt_tokens, (std::vector<int32_t>{1, 2147483647}));
  r = api_parse_request(R"({"prompt": ""})", ApiEndpoint::kCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt, "");
  r = api_parse_request(R"({"prompt": "caf\u00e9 \"q\"\n"})", ApiEndpoint::kCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->prompt, "caf\xc3\xa9 \"q\"\n");
}

TEST(ApiParse, PromptRejected) {
  const auto c = [](const char* body) { return api_parse_request(body, ApiEndpoint::kCompletions); };
  EXPECT_TRUE(rejected(c(R"({})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": null})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": []})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [[]]})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": 5})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": true})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": {"text": "x"}})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [1, "a"]})"), "prompt"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [1, -2]})"), "prompt[1]"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [1.5]})"), "prompt[0]"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [2147483648]})"), "prompt[0]"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [[1, "x"]]})"), "prompt[0][1]"));
  EXPECT_TRUE(rejected(c(R"({"prompt": [[1, true]]})"), "prompt[0][1]"));
  // Several prompts in one request: n is the way to ask for several completions.
  for (const char* body : {R"({"prompt": ["a", "b"]})", R"({"prompt": [[1], [2]]})"}) {
    auto r = c(body);
    ASSERT_TRUE(rejected(r, "prompt")) << body;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("only one prompt per request"), std::string::npos);
    EXPECT_NE(r.status().message().find("use n"), std::string::npos);
  }
}

TEST(ApiParse, ChatMessages) {
  auto r = api_parse_request(R"({"model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "developer", "content": "really"},
      {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
      {"role": "assistant", "content": null},
      {"role": "assistant"},
      {"role": "tool", "content": "42"},
      {"role": "user", "content": []}]})",
                             ApiEndpoint::kChatCompletions);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->endpoint, ApiEndpoint::kChatCompletions);
  ASSERT_EQ(r->messages.size(), 7u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "be brief");
  EXPECT_EQ(r->messages[1].role, "system");  // developer is read as system
  EXPECT_EQ(r->messages[2].content, "part one\npart two");
  EXPECT_EQ(r->messages[3].role, "assistant");
  EXPECT_EQ(r->messages[3].content, "");
  EXPECT_EQ(r->messages[4].content, "");
  EXPECT_EQ(r->messages[5].role, "tool");
  EXPECT_EQ(r->messages[6].content, "");
  EXPECT_FALSE(r->prompt.has_value());
}

TEST(ApiParse, ChatMessagesRejected) {
  const auto c = [](const std::string& messages) {
    return api_parse_request(R"({"messages": )" + messages + "}", ApiEndpoint::kChatCompletions);
  };
  EXPECT_TRUE(rejected(api_parse_request(R"({"prompt": "x"})", ApiEndpoint::kChatCompletions), "messages"));
  EXPECT_TRUE(rejected(c("null"), "messages"));
  EXPECT_TRUE(rejected(c("[]"), "messages"));
  EXPECT_TRUE(rejected(c(R"("hi")"), "messages"));
  EXPECT_TRUE(rejected(c(R"({"role": "user", "content": "hi"})"), "messages"));
  EXPECT_TRUE(rejected(c(R"(["hi"])"), "messages[0]"));
  EXPECT_TRUE(rejected(c(R"([{"content": "hi"}])"), "messages[0].role"));
  EXPECT_TRUE(rejected(c(R"([{"role": 1, "content": "hi"}])"), "messages[0].role"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": "a"}, {"role": "robot", "content": "hi"}])"),
                       "messages[1].role"));
  EXPECT_TRUE(rejected(c(R"([{"role": "User", "content": "hi"}])"), "messages[0].role"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user"}])"), "messages[0].content"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": null}])"), "messages[0].content"));
  EXPECT_TRUE(rejected(c(R"([{"role": "system", "content": 5}])"), "messages[0].content"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": {"type": "text"}}])"), "messages[0].content"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": ["hi"]}])"), "messages[0].content[0]"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": [{"text": "hi"}]}])"), "messages[0].content[0].type"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": [{"type": 3}]}])"), "messages[0].content[0].type"));
  EXPECT_TRUE(rejected(c(R"([{"role": "user", "content": [{"type": "text"}]}])"), "messages[0].content[0].text"));
  EXPECT_TRUE(
      rejected(c(R"([{"role": "user", "content": [{"type": "text", "text": 1}]}])"), "messages[0].content[0].text"));
  // A long unknown role is quoted shortened, still on a character boundary.
  auto r = c(R"([{"role": ")" + std::string(39, 'x') + "\xc3\xa9" + std::string(30, 'y') + R"(", "content": "hi"}])");
  ASSERT_TRUE(rejected(r, "messages[0].role"));
  EXPECT_NE(r.status().message().find(std::string(39, 'x') + "...\""), std::string::npos) << r.status().message();
  EXPECT_LT(r.status().message().size(), 200u);
}

TEST(ApiParse, NonTextContentPartsAreUnsupported) {
  auto r = api_parse_request(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
          {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})",
      ApiEndpoint::kChatCompletions);
  ASSERT_TRUE(rejected(r, "messages[0].content[1].type"));
  EXPECT_EQ(r.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(r.status().message().find("\"image_url\""), std::string::npos);
  EXPECT_EQ(error_of(r.status()).at("code"), "unsupported_value");
}

struct NumberCase {
  const char* field;
  std::vector<const char*> good;
  std::vector<const char*> bad;
};

TEST(ApiParse, NumericFieldsRangesAndTypes) {
  const std::vector<NumberCase> cases = {
      {"temperature", {"0", "2", "0.7", "1"}, {"-0.01", "2.01", "7", "\"hot\"", "true", "[1]", "{}", "1e400"}},
      {"top_p", {"1", "0.01", "1.0"}, {"0", "-0.5", "1.01", "\"0.9\"", "false"}},
      {"top_k", {"-1", "0", "1", "40", "2147483647"}, {"-2", "1.5", "\"5\"", "true", "2147483648"}},
      {"min_p", {"0", "1", "0.1"}, {"-0.1", "1.5", "\"x\""}},
      {"presence_penalty", {"-2", "2", "0", "1.5"}, {"-2.5", "3", "\"0\""}},
      {"frequency_penalty", {"-2", "2", "0"}, {"-2.01", "2.01", "\"1\""}},
      {"repetition_penalty", {"1", "2", "0.5", "1.2"}, {"0", "-1", "2.5", "true"}},
      {"seed", {"0", "42", "9223372036854775807", "18446744073709551615", "3.0"},
       {"-1", "1.5", "\"1\"", "true", "18446744073709551616"}},
      {"n", {"1", "8", "2.0"}, {"0", "9", "-1", "1.5", "true", "\"2\"", "[2]"}},
      {"max_tokens", {"0", "1", "2048", "2147483647"}, {"-1", "1.5", "true", "\"16\"", "2147483648", "1e30"}},
      {"logprobs", {"0", "1", "8"}, {"-1", "9", "true", "1.5", "\"2\""}},
  };
  for (const NumberCase& c : cases) {
    for (const char* v : c.good) {
      auto r = completion(fmt::format(R"("{}": {})", c.field, v));
      EXPECT_TRUE(r.is_ok()) << c.field << "=" << v << ": " << r.status().to_string();
    }
    for (const char* v : c.bad) {
      auto r = completion(fmt::format(R"("{}": {})", c.field, v));
      EXPECT_TRUE(rejected(r, c.field)) << c.field << "=" << v;
    }
  }
}

TEST(ApiParse, NumericValuesAreStored) {
  auto r = completion(R"("top_k": -1, "seed": 18446744073709551615, "n": 2.0, "max_tokens": 0, "temperature": 0)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->sampling.top_k, 0);  // -1 means off
  EXPECT_EQ(r->seed, std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(r->n, 2);
  EXPECT_EQ(r->max_tokens, 0);
  EXPECT_EQ(r->sampling.temperature, 0.0f);
}

TEST(ApiParse, WrongTypesAreInvalidArgumentNamingTheField) {
  for (const char* extra : {R"("temperature": "hot")", R"("n": 1.5)", R"("max_tokens": true)", R"("stream": 1)",
                            R"("user": 5)", R"("model": ["m"])", R"("ignore_eos": "yes")", R"("echo": 0)"}) {
    auto r = completion(extra);
    ASSERT_FALSE(r.is_ok()) << extra;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << extra;
    const std::string field = std::string(extra).substr(1, std::string(extra).find('"', 1) - 1);
    EXPECT_TRUE(rejected(r, field)) << extra;
  }
  auto r = completion(R"("temperature": 7)");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "temperature must be between 0 and 2, not 7");
  r = completion(R"("top_p": 0)");
  EXPECT_EQ(r.status().message(), "top_p must be greater than 0 and at most 1, not 0");
  r = completion(R"("n": 9)");
  EXPECT_EQ(r.status().message(), "n must be between 1 and 8, not 9");
  r = completion(R"("max_tokens": -1)");
  EXPECT_EQ(r.status().message(), "max_tokens must be at least 0, not -1");
  r = completion(R"("top_k": 2147483648)");
  EXPECT_EQ(r.status().message(), "top_k must be at most 2147483647, not 2147483648");
  r = completion(R"("n": 1.5)");
  EXPECT_EQ(r.status().message(), "n must be an integer, not 1.5");
  r = completion(R"("max_tokens": true)");
  EXPECT_EQ(r.status().message(), "max_tokens must be an integer, not a boolean");
}

TEST(ApiParse, ChatMaxTokens) {
  auto r = chat(R"("max_tokens": 10)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->max_tokens, 10);
  r = chat(R"("max_completion_tokens": 12)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->max_tokens, 12);
  r = chat(R"("max_tokens": 10, "max_completion_tokens": 12)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->max_tokens, 12);
  EXPECT_TRUE(rejected(chat(R"("max_tokens": 0)"), "max_tokens"));
  EXPECT_TRUE(rejected(chat(R"("max_completion_tokens": 0)"), "max_completion_tokens"));
  EXPECT_TRUE(rejected(chat(R"("max_completion_tokens": "8")"), "max_completion_tokens"));
  // Completions refuse the chat-only name rather than ignore it.
  EXPECT_TRUE(rejected(completion(R"("max_completion_tokens": 8)"), "max_completion_tokens"));
}

TEST(ApiParse, StopStrings) {
  auto r = completion(R"("stop": "END")");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->stop, std::vector<std::string>{"END"});
  r = completion(R"("stop": "")");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->stop.empty());
  r = completion(R"("stop": ["a", "", "b", "\u00e9"])");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b", "\xc3\xa9"}));
  r = completion(R"("stop": [])");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->stop.empty());
  auto too_many = completion(R"("stop": ["a", "b", "c", "d", "e"])");
  ASSERT_TRUE(rejected(too_many, "stop"));
  EXPECT_NE(too_many.status().message().find("at most 4"), std::string::npos);
  EXPECT_TRUE(rejected(completion(R"("stop": 5)"), "stop"));
  EXPECT_TRUE(rejected(completion(R"("stop": {"a": 1})"), "stop"));
  EXPECT_TRUE(rejected(completion(R"("stop": ["a", 1])"), "stop[1]"));
  EXPECT_TRUE(rejected(completion(R"("stop": [null])"), "stop[0]"));
  EXPECT_TRUE(rejected(chat(R"("stop": ["a", "b", "c", "d", "e"])"), "stop"));
}

TEST(ApiParse, StreamAndStreamOptions) {
  auto r = chat(R"("stream": true, "stream_options": {"include_usage": true})");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  r = chat(R"("stream": true, "stream_options": {})");
  ASSERT_TRUE(r.is_ok());
  EXPECT_FALSE(r->include_usage);
  r = chat(R"("stream": false, "stream_options": null)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(rejected(chat(R"("stream": "yes")"), "stream"));
  EXPECT_TRUE(rejected(chat(R"("stream_options": {"include_usage": true})"), "stream_options"));
  EXPECT_TRUE(rejected(chat(R"("stream": false, "stream_options": {"include_usage": true})"), "stream_options"));
  EXPECT_TRUE(rejected(chat(R"("stream": true, "stream_options": true)"), "stream_options"));
  EXPECT_TRUE(
      rejected(chat(R"("stream": true, "stream_options": {"include_usage": "yes"})"), "stream_options.include_usage"));
}

TEST(ApiParse, EchoIsForCompletionsOnly) {
  auto r = completion(R"("echo": true)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(r->echo);
  EXPECT_TRUE(rejected(completion(R"("echo": "true")"), "echo"));
  EXPECT_TRUE(rejected(chat(R"("echo": true)"), "echo"));  // not a chat field
}

TEST(ApiParse, ChatLogprobs) {
  auto r = chat(R"("logprobs": true)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->logprobs, 0);
  r = chat(R"("logprobs": true, "top_logprobs": 5)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->logprobs, 5);
  r = chat(R"("logprobs": false)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->logprobs, -1);
  r = chat(R"("logprobs": true, "top_logprobs": 8)");
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->logprobs, kMaxTopLogprobs);
  EXPECT_TRUE(rejected(chat(R"("logprobs": 5)"), "logprobs"));
  EXPECT_TRUE(rejected(chat(R"("logprobs": "true")"), "logprobs"));
  EXPECT_TRUE(rejected(chat(R"("top_logprobs": 2)"), "top_logprobs"));
  EXPECT_TRUE(rejected(chat(R"("logprobs": false, "top_logprobs": 0)"), "top_logprobs"));
  EXPECT_TRUE(rejected(chat(R"("logprobs": true, "top_logprobs": 9)"), "top_logprobs"));
  EXPECT_TRUE(rejected(chat(R"("logprobs": true, "top_logprobs": -1)"), "top_logprobs"));
  EXPECT_TRUE(rejected(chat(R"("logprobs": true, "top_logprobs": true)"), "top_logprobs"));
}

TEST(ApiParse, MalformedBodies) {
  for (const char* body : {"", "{", "not json", R"({"prompt": "x",})", R"({"prompt": 'x'})", "{\"prompt\": \"x\"} {}",
                           "{\"prompt\": \"\xff\"}", R"({"prompt": "\ud800"})", R"({"prompt": NaN})"}) {
    auto r = api_parse_request(body, ApiEndpoint::kCompletions);
    ASSERT_FALSE(r.is_ok()) << body;
    EXPECT_EQ(api_status_of(r.status()), 400) << body;
    const json::object err = error_of(r.status());  // the message, even about bad bytes, is valid JSON
    EXPECT_EQ(err.at("type"), "invalid_request_error");
    EXPECT_TRUE(err.at("param").is_null()) << err;
  }
  for (const char* body : {"[]", R"("prompt")", "5", "null", "true", R"([{"prompt": "x"}])"}) {
    for (const ApiEndpoint e : {ApiEndpoint::kCompletions, ApiEndpoint::kChatCompletions}) {
      auto r = api_parse_request(body, e);
      ASSERT_FALSE(r.is_ok()) << body;
      EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument) << body;
      EXPECT_NE(r.status().message().find("JSON object"), std::string::npos) << r.status().message();
    }
  }
}

TEST(ApiParse, HugeNestingIsRefused) {
  for (const size_t depth : {40u, 1000u, 200000u}) {
    const std::string body =
        R"({"prompt": "x", "metadata": )" + std::string(depth, '[') + std::string(depth, ']') + "}";
    auto r = api_parse_request(body, ApiEndpoint::kCompletions);
    ASSERT_FALSE(r.is_ok()) << depth;
    EXPECT_EQ(api_status_of(r.status()), 400);
    EXPECT_EQ(r.status().code(), ErrorCode::kFormat);
  }
  const std::string objects = R"({"prompt": "x", "metadata": )" + [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += R"({"a":)";
    s += "1";
    for (int i = 0; i < 100000; ++i) s += "}";
    return s;
  }() + "}";
  EXPECT_FALSE(api_parse_request(objects, ApiEndpoint::kCompletions).is_ok());
  // Ordinary nesting in a field that takes any JSON is fine.
  const std::string modest = R"({"messages": [{"role": "user", "content": "x"}], "metadata": {"a": )" +
                             std::string(10, '[') + std::string(10, ']') + "}}";
  EXPECT_TRUE(api_parse_request(modest, ApiEndpoint::kChatCompletions).is_ok());
}

// ---- errors -------------------------------------------------------------------------

TEST(ApiError, StatusCodes) {
  EXPECT_EQ(api_status_of(Status::ok()), 200);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kInvalidArgument, "x")), 400);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kFormat, "x")), 400);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kOutOfRange, "x")), 400);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kUnsupported, "x")), 400);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kNotFound, "x")), 404);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kResourceExhausted, "x")), 429);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kUnavailable, "x")), 503);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kInternal, "x")), 500);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kIo, "x")), 500);
  EXPECT_EQ(api_status_of(Status(ErrorCode::kShmTooSmall, "x")), 500);
}

TEST(ApiError, Bodies) {
  struct Case {
    Status status;
    const char* type;
    const char* param;  // nullptr: null
    const char* code;   // nullptr: null
  };
  const std::vector<Case> cases = {
      {Status(ErrorCode::kOutOfRange, "temperature must be between 0 and 2, not 7"), "invalid_request_error",
       "temperature", nullptr},
      {Status(ErrorCode::kInvalidArgument, "messages[2].content is required"), "invalid_request_error",
       "messages[2].content", nullptr},
      {Status(ErrorCode::kInvalidArgument, "prompt: only one prompt"), "invalid_request_error", "prompt", nullptr},
      {Status(ErrorCode::kInvalidArgument, "the body is empty"), "invalid_request_error", nullptr, nullptr},
      {Status(ErrorCode::kInvalidArgument, "nothing"), "invalid_request_error", nullptr, nullptr},
      {Status(ErrorCode::kNotFound, "model \"gpt-9\" is not served here"), "invalid_request_error", "model",
       "model_not_found"},
      {Status(ErrorCode::kNotFound, "no such route"), "invalid_request_error", nullptr, "not_found"},
      {Status(ErrorCode::kResourceExhausted, "all slots are busy"), "rate_limit_error", nullptr,
       "rate_limit_exceeded"},
      {Status(ErrorCode::kUnavailable, "the engine is restarting"), "server_error", nullptr, "service_unavailable"},
      {Status(ErrorCode::kInternal, "bug"), "server_error", nullptr, "internal_error"},
      {Status(ErrorCode::kInternal, ""), "server_error", nullptr, "internal_error"},
  };
  for (const Case& c : cases) {
    const json::value v = json::parse(api_error_body(c.status));
    ASSERT_TRUE(v.is_object());
    ASSERT_EQ(v.as_object().size(), 1u);
    const json::object& err = v.as_object().at("error").as_object();
    EXPECT_EQ(err.at("message"), json::string(c.status.message())) << c.status.message();
    EXPECT_EQ(err.at("type"), c.type) << c.status.message();
    if (c.param == nullptr) {
      EXPECT_TRUE(err.at("param").is_null()) << c.status.message();
    } else {
      EXPECT_EQ(err.at("param"), c.param) << c.status.message();
    }
    if (c.code == nullptr) {
      EXPECT_TRUE(err.at("code").is_null()) << c.status.message();
    } else {
      EXPECT_EQ(err.at("code"), c.code) << c.status.message();
    }
  }
  // Awkward bytes in a message still make valid JSON.
  const json::value v = json::parse(api_error_body(Status(ErrorCode::kInternal, "quote \" newline \n bad \xff")));
  EXPECT_NE(v.at("error").at("message").as_string().find("quote \" newline \n bad"), json::string::npos);
}

TEST(ApiError, StreamError) {
  const std::string event = api_stream_error(Status(ErrorCode::kUnavailable, "the engine went away"));
  ASSERT_EQ(event.rfind("data: ", 0), 0u);
  ASSERT_EQ(event.substr(event.size() - 2), "\n\n");
  const json::value v = json::parse(event.substr(6, event.size() - 8));
  EXPECT_EQ(v.at("error").at("message"), "the engine went away");
  EXPECT_EQ(v.at("error").at("type"), "server_error");
  EXPECT_EQ(kApiStreamDone, "data: [DONE]\n\n");
}

// ---- responses ----------------------------------------------------------------------

ApiRequest request_for(ApiEndpoint endpoint, int32_t logprobs = -1, bool include_usage = false) {
  ApiRequest r;
  r.endpoint = endpoint;
  r.logprobs = logprobs;
  r.stream = include_usage;
  r.include_usage = include_usage;
  return r;
}

std::vector<uint8_t> bytes(std::string_view s) { return {s.begin(), s.end()}; }

// Three tokens: "Hello", " caf\u00e9" (6 bytes), "!" with alternatives.
std::vector<ApiTokenLogprob> sample_logprobs() {
  std::vector<ApiTokenLogprob> out(3);
  out[0].token = "Hello";
  out[0].bytes = bytes("Hello");
  out[0].logprob = -0.1f;
  out[0].top = {{"Hello", -0.1f}, {"Hi", -2.5f}, {"Hey", -3.0f}};
  out[0].top_bytes = {bytes("Hello"), bytes("Hi"), bytes("Hey")};
  out[1].token = " caf\xc3\xa9";
  out[1].bytes = bytes(" caf\xc3\xa9");
  out[1].logprob = -1.25f;
  out[1].top = {{" tea", -0.5f}, {" caf\xc3\xa9", -1.25f}};
  out[2].token = "!";  // bytes left empty: those of the text
  out[2].logprob = -std::numeric_limits<float>::infinity();
  out[2].top = {{".", -0.01f}};
  return out;
}

TEST(ApiResponse, CompletionBody) {
  const ApiRequest req = request_for(ApiEndpoint::kCompletions);
  std::vector<ApiChoice> choices(2);
  choices[0].text = "Once upon a \"time\"\n";
  choices[0].finish_reason = "length";
  choices[1].index = 1;
  choices[1].text = "caf\xc3\xa9";
  choices[1].finish_reason = "stop";
  const std::string body = api_response_body(req, {"cmpl-1", 1700000000, "stories"}, choices, ApiUsage{5, 7});
  const json::value v = json::parse(body);
  EXPECT_EQ(v.at("id"), "cmpl-1");
  EXPECT_EQ(v.at("object"), "text_completion");
  EXPECT_EQ(v.at("created").to_number<int64_t>(), 1700000000);
  EXPECT_EQ(v.at("model"), "stories");
  const json::array& cs = v.at("choices").as_array();
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].at("index").to_number<int>(), 0);
  EXPECT_EQ(cs[0].at("text"), "Once upon a \"time\"\n");
  EXPECT_EQ(cs[0].at("finish_reason"), "length");
  EXPECT_TRUE(cs[0].at("logprobs").is_null());
  EXPECT_EQ(cs[1].at("index").to_number<int>(), 1);
  EXPECT_EQ(cs[1].at("text"), "caf\xc3\xa9");
  EXPECT_EQ(cs[1].at("finish_reason"), "stop");
  EXPECT_FALSE(cs[0].as_object().contains("message"));
  EXPECT_EQ(v.at("usage").at("prompt_tokens").to_number<int>(), 5);
  EXPECT_EQ(v.at("usage").at("completion_tokens").to_number<int>(), 7);
  EXPECT_EQ(v.at("usage").at("total_tokens").to_number<int>(), 12);
}

TEST(ApiResponse, CompletionLogprobs) {
  const ApiRequest req = request_for(ApiEndpoint::kCompletions, /*logprobs=*/2);
  std::vector<ApiChoice> choices(1);
  choices[0].text = "prompt! Hello caf\xc3\xa9!";
  choices[0].finish_reason = "length";
  choices[0].logprobs = sample_logprobs();
  choices[0].text_offset_base = 8;  // echo: the prompt comes first
  const json::value v = json::parse(api_response_body(req, {"cmpl-2", 1, "m"}, choices, ApiUsage{2, 3}));
  const json::value& lp = v.at("choices").at(0).at("logprobs");
  ASSERT_TRUE(lp.is_object());
  const json::array& tokens = lp.at("tokens").as_array();
  ASSERT_EQ(tokens.size(), 3u);
  EXPECT_EQ(tokens[1], " caf\xc3\xa9");
  const json::array& token_logprobs = lp.at("token_logprobs").as_array();
  EXPECT_EQ(token_logprobs[0].to_number<double>(), -0.1);  // the float's shortest decimal, exactly
  EXPECT_EQ(token_logprobs[1].to_number<double>(), -1.25);
  EXPECT_EQ(token_logprobs[2].to_number<double>(), -9999.0);  // -inf is not JSON
  const json::array& offsets = lp.at("text_offset").as_array();
  ASSERT_EQ(offsets.size(), 3u);
  EXPECT_EQ(offsets[0].to_number<int>(), 8);
  EXPECT_EQ(offsets[1].to_number<int>(), 13);
  EXPECT_EQ(offsets[2].to_number<int>(), 19);  // " caf\u00e9" is 6 bytes
  const json::array& top = lp.at("top_logprobs").as_array();
  ASSERT_EQ(top.size(), 3u);
  // At most `logprobs` alternatives, plus the sampled token.
  EXPECT_EQ(top[0].as_object().size(), 2u);
  EXPECT_EQ(top[0].at("Hello").to_number<double>(), -0.1);
  EXPECT_EQ(top[0].at("Hi").to_number<double>(), -2.5);
  EXPECT_EQ(top[1].as_object().size(), 2u);
  EXPECT_EQ(top[1].at(" tea").to_number<double>(), -0.5);
  EXPECT_EQ(top[2].as_object().size(), 2u);
  EXPECT_EQ(top[2].at("!").to_number<double>(), -9999.0);

  // logprobs 0: no alternatives, the sampled token only.
  const ApiRequest zero = request_for(ApiEndpoint::kCompletions, 0);
  const json::value z = json::parse(api_response_body(zero, {"c", 1, "m"}, choices, ApiUsage{}));
  EXPECT_EQ(z.at("choices").at(0).at("logprobs").at("top_logprobs").at(1).as_object().size(), 1u);
  // Asked for, with no tokens: empty lists, not null.
  choices[0].logprobs.clear();
  const json::value e = json::parse(api_response_body(req, {"c", 1, "m"}, choices, ApiUsage{}));
  EXPECT_TRUE(e.at("choices").at(0).at("logprobs").at("tokens").as_array().empty());
}

TEST(ApiResponse, TextOffsetCountsTheBytesTokensAdd) {
  // A byte-fallback token adds one byte to the text though its shown text is U+FFFD.
  std::vector<ApiTokenLogprob> lps(3);
  lps[0].token = "\xEF\xBF\xBD";
  lps[0].bytes = {0xF0};
  lps[1].token = "\xEF\xBF\xBD";
  lps[1].bytes = {0x9F, 0xA6, 0x99};
  lps[2].token = " ok";
  const ApiRequest req = request_for(ApiEndpoint::kCompletions, 0);
  std::vector<ApiChoice> choices(1);
  choices[0].text = "\xF0\x9F\xA6\x99 ok";
  choices[0].logprobs = lps;
  const json::value v = json::parse(api_response_body(req, {"c", 1, "m"}, choices, ApiUsage{}));
  EXPECT_EQ(v.at("choices").at(0).at("logprobs").at("text_offset"), json::value_from(std::vector<int>{0, 1, 4}));
  const ApiRequest chat_req = request_for(ApiEndpoint::kChatCompletions, 0);
  const json::value c = json::parse(api_response_body(chat_req, {"c", 1, "m"}, choices, ApiUsage{}));
  EXPECT_EQ(c.at("choices").at(0).at("logprobs").at("content").at(0).at("bytes"),
            json::value_from(std::vector<int>{0xF0}));
}

TEST(ApiResponse, ChatBody) {
  const ApiRequest req = request_for(ApiEndpoint::kChatCompletions);
  std::vector<ApiChoice> choices(1);
  choices[0].text = "Hello \xf0\x9f\xa6\x99";
  choices[0].finish_reason = "stop";
  const json::value v = json::parse(api_response_body(req, {"chatcmpl-1", 42, "m"}, choices, ApiUsage{9, 2}));
  EXPECT_EQ(v.at("id"), "chatcmpl-1");
  EXPECT_EQ(v.at("object"), "chat.completion");
  EXPECT_EQ(v.at("created").to_number<int64_t>(), 42);
  const json::value& c = v.at("choices").at(0);
  EXPECT_EQ(c.at("index").to_number<int>(), 0);
  EXPECT_EQ(c.at("message").at("role"), "assistant");
  EXPECT_EQ(c.at("message").at("content"), "Hello \xf0\x9f\xa6\x99");
  EXPECT_EQ(c.at("finish_reason"), "stop");
  EXPECT_TRUE(c.at("logprobs").is_null());
  EXPECT_FALSE(c.as_object().contains("text"));
  EXPECT_EQ(v.at("usage").at("total_tokens").to_number<int>(), 11);
}

TEST(ApiResponse, ChatLogprobs) {
  const ApiRequest req = request_for(ApiEndpoint::kChatCompletions, /*logprobs=*/1);
  std::vector<ApiChoice> choices(1);
  choices[0].text = "Hello caf\xc3\xa9!";
  choices[0].finish_reason = "length";
  choices[0].logprobs = sample_logprobs();
  const json::value v = json::parse(api_response_body(req, {"c", 1, "m"}, choices, ApiUsage{1, 3}));
  const json::array& content = v.at("choices").at(0).at("logprobs").at("content").as_array();
  ASSERT_EQ(content.size(), 3u);
  EXPECT_EQ(content[0].at("token"), "Hello");
  EXPECT_EQ(content[0].at("logprob").to_number<double>(), -0.1);
  EXPECT_EQ(content[1].at("bytes"), json::value_from(std::vector<int>{32, 99, 97, 102, 0xc3, 0xa9}));
  EXPECT_EQ(content[2].at("bytes"), json::value_from(std::vector<int>{'!'}));
  EXPECT_EQ(content[2].at("logprob").to_number<double>(), -9999.0);
  const json::array& top0 = content[0].at("top_logprobs").as_array();
  ASSERT_EQ(top0.size(), 1u);  // limited to top_logprobs
  EXPECT_EQ(top0[0].at("token"), "Hello");
  EXPECT_EQ(top0[0].at("logprob").to_number<double>(), -0.1);
  EXPECT_EQ(top0[0].at("bytes"), json::value_from(std::vector<int>{'H', 'e', 'l', 'l', 'o'}));
  // No top_bytes given: the alternative's own text.
  EXPECT_EQ(content[1].at("top_logprobs").at(0).at("bytes"), json::value_from(std::vector<int>{' ', 't', 'e', 'a'}));

  const ApiRequest none = request_for(ApiEndpoint::kChatCompletions, 0);
  const json::value z = json::parse(api_response_body(none, {"c", 1, "m"}, choices, ApiUsage{}));
  EXPECT_TRUE(z.at("choices").at(0).at("logprobs").at("content").at(0).at("top_logprobs").as_array().empty());
}

// The JSON of one "data: {...}\n\n" event.
json::value event_json(const std::string& event) {
  EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
  EXPECT_GE(event.size(), 8u);
  EXPECT_EQ(event.substr(event.size() - 2), "\n\n") << event;
  EXPECT_EQ(event.find('\n'), event.size() - 2) << "an event is one line: " << event;
  return json::parse(event.substr(6, event.size() - 8));
}

TEST(ApiStream, CompletionChunks) {
  for (const bool usage : {false, true}) {
    const ApiRequest req = request_for(ApiEndpoint::kCompletions, -1, usage);
    const json::value first = event_json(api_stream_chunk(req, {"cmpl-9", 5, "m"}, 1, "Once\nupon", "", {}, false));
    EXPECT_EQ(first.at("id"), "cmpl-9");
    EXPECT_EQ(first.at("object"), "text_completion");
    EXPECT_EQ(first.at("created").to_number<int>(), 5);
    EXPECT_EQ(first.at("model"), "m");
    const json::array& cs = first.at("choices").as_array();
    ASSERT_EQ(cs.size(), 1u);
    EXPECT_EQ(cs[0].at("index").to_number<int>(), 1);
    EXPECT_EQ(cs[0].at("text"), "Once\nupon");
    EXPECT_TRUE(cs[0].at("finish_reason").is_null());
    EXPECT_TRUE(cs[0].at("logprobs").is_null());
    EXPECT_EQ(first.as_object().contains("usage"), usage);
    if (usage) {
      EXPECT_TRUE(first.at("usage").is_null());
    }

    const json::value last = event_json(api_stream_chunk(req, {"cmpl-9", 5, "m"}, 1, "", "stop", {}, false));
    EXPECT_EQ(last.at("choices").at(0).at("text"), "");
    EXPECT_EQ(last.at("choices").at(0).at("finish_reason"), "stop");
  }
}

TEST(ApiStream, ChatChunks) {
  const ApiRequest req = request_for(ApiEndpoint::kChatCompletions, -1, /*include_usage=*/true);
  const json::value role = event_json(api_stream_chunk(req, {"chatcmpl-3", 7, "m"}, 0, "", "", {}, true));
  EXPECT_EQ(role.at("object"), "chat.completion.chunk");
  const json::value& d0 = role.at("choices").at(0).at("delta");
  EXPECT_EQ(d0.at("role"), "assistant");
  EXPECT_EQ(d0.at("content"), "");
  EXPECT_TRUE(role.at("choices").at(0).at("finish_reason").is_null());
  EXPECT_TRUE(role.at("usage").is_null());

  const json::value mid = event_json(api_stream_chunk(req, {"chatcmpl-3", 7, "m"}, 0, "Hi \"there\"", "", {}, false));
  const json::value& d1 = mid.at("choices").at(0).at("delta");
  EXPECT_FALSE(d1.as_object().contains("role"));
  EXPECT_EQ(d1.at("content"), "Hi \"there\"");
  EXPECT_FALSE(mid.at("choices").at(0).as_object().contains("text"));

  const json::value last = event_json(api_stream_chunk(req, {"chatcmpl-3", 7, "m"}, 0, "", "length", {}, false));
  EXPECT_TRUE(last.at("choices").at(0).at("delta").as_object().empty());
  EXPECT_EQ(last.at("choices").at(0).at("finish_reason"), "length");

  const json::value u = event_json(api_stream_usage_chunk(req, {"chatcmpl-3", 7, "m"}, ApiUsage{4, 6}));
  EXPECT_EQ(u.at("object"), "chat.completion.chunk");
  EXPECT_EQ(u.at("id"), "chatcmpl-3");
  EXPECT_TRUE(u.at("choices").as_array().empty());
  EXPECT_EQ(u.at("usage").at("prompt_tokens").to_number<int>(), 4);
  EXPECT_EQ(u.at("usage").at("completion_tokens").to_number<int>(), 6);
  EXPECT_EQ(u.at("usage").at("total_tokens").to_number<int>(), 10);

  const ApiRequest plain = request_for(ApiEndpoint::kChatCompletions);
  const json::value no_usage = event_json(api_stream_chunk(plain, {"c", 7, "m"}, 0, "x", "", {}, false));
  EXPECT_FALSE(no_usage.as_object().contains("usage"));
  const json::value cu = event_json(api_stream_usage_chunk(request_for(ApiEndpoint::kCompletions, -1, true), {"cmpl-1", 7, "m"}, ApiUsage{1, 1}));
  EXPECT_EQ(cu.at("object"), "text_completion");
  EXPECT_TRUE(cu.at("choices").as_array().empty());
}

TEST(ApiStream, LogprobsInChunks) {
  const std::vector<ApiTokenLogprob> lps = sample_logprobs();
  const ApiRequest creq = request_for(ApiEndpoint::kCompletions, 1);
  const json::value c =
      event_json(api_stream_chunk(creq, {"c", 1, "m"}, 0, "Hello caf\xc3\xa9!", "", lps, false, /*text_offset_base=*/20));
  const json::value& clp = c.at("choices").at(0).at("logprobs");
  EXPECT_EQ(clp.at("tokens").as_array().size(), 3u);
  EXPECT_EQ(clp.at("text_offset"), json::value_from(std::vector<int>{20, 25, 31}));
  EXPECT_EQ(clp.at("top_logprobs").at(0).as_object().size(), 1u);  // "Hello" is both the best and the sampled
  // The last chunk carries no tokens: null logprobs.
  const json::value cl = event_json(api_stream_chunk(creq, {"c", 1, "m"}, 0, "", "stop", {}, false, 26));
  EXPECT_TRUE(cl.at("choices").at(0).at("logprobs").is_null());

  const ApiRequest hreq = request_for(ApiEndpoint::kChatCompletions, 2);
  const json::value h = event_json(api_stream_chunk(hreq, {"c", 1, "m"}, 0, "Hello", "", {lps[0]}, true));
  const json::array& content = h.at("choices").at(0).at("logprobs").at("content").as_array();
  ASSERT_EQ(content.size(), 1u);
  EXPECT_EQ(content[0].at("token"), "Hello");
  EXPECT_EQ(content[0].at("top_logprobs").as_array().size(), 2u);
  // Not asked for: null even when the caller passes some.
  const json::value n = event_json(
      api_stream_chunk(request_for(ApiEndpoint::kChatCompletions), {"c", 1, "m"}, 0, "Hello", "", {lps[0]}, false));
  EXPECT_TRUE(n.at("choices").at(0).at("logprobs").is_null());
}

}  // namespace
}  // namespace hearth
