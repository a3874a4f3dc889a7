// The Anthropic Messages and OpenAI Responses shapes: their requests parsed into the chat
// request (content blocks and input items onto messages, tools and tool_choice, output
// constraints, refusals by name), their bodies and error bodies, and their typed event
// streams, checked by parsing them back as JSON.
#include "frontend/dialects.h"

#include <string>
#include <vector>

#include <boost/json.hpp>
#include <gtest/gtest.h>

namespace hearth {
namespace {

namespace json = boost::json;

Result<ApiRequest> messages(const std::string& body) { return messages_parse_request(body, false); }
Result<ApiRequest> responses(const std::string& body) { return responses_parse_request(body); }

// Refused with a 400 whose message holds `says`.
::testing::AssertionResult refused(const Result<ApiRequest>& r, std::string_view says) {
  if (r.is_ok()) return ::testing::AssertionFailure() << "accepted";
  if (api_status_of(r.status()) != 400) {
    return ::testing::AssertionFailure() << "status " << api_status_of(r.status()) << ": " << r.status().message();
  }
  if (r.status().message().find(says) == std::string::npos) {
    return ::testing::AssertionFailure() << "message: " << r.status().message();
  }
  return ::testing::AssertionSuccess();
}

// The events of a typed stream: (name, data) in order.
std::vector<std::pair<std::string, json::object>> events_of(const std::string& sse) {
  std::vector<std::pair<std::string, json::object>> out;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    const std::string e = sse.substr(pos, end - pos);
    EXPECT_EQ(e.rfind("event: ", 0), 0u) << e;
    const size_t nl = e.find('\n');
    EXPECT_EQ(e.substr(nl + 1, 6), "data: ") << e;
    out.emplace_back(e.substr(7, nl - 7), json::parse(e.substr(nl + 7)).as_object());
    EXPECT_EQ(out.back().first, out.back().second.at("type").as_string()) << e;
    pos = end + 2;
  }
  return out;
}

constexpr std::string_view kUser = R"("messages": [{"role": "user", "content": "hi"}])";

TEST(MessagesParse, SystemTextAndSampling) {
  auto r = messages(R"({"model": "m", "max_tokens": 9, "system": [{"type": "text", "text": "a"},
      {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}}], "temperature": 0.5, "top_p": 0.9,
      "top_k": 7, "stop_sequences": ["x", "yy"], "stream": true, "metadata": {"user_id": "u1"},
      "thinking": {"type": "disabled"}, "service_tier": "auto", )" + std::string(kUser) + "}");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->endpoint, ApiEndpoint::kMessages);
  ASSERT_EQ(r->messages.size(), 2u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "a\nb");
  EXPECT_EQ(r->messages[1].content, "hi");
  EXPECT_EQ(r->max_tokens, 9);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 7);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"x", "yy"}));
  EXPECT_TRUE(r->stream);
  EXPECT_EQ(r->user, "u1");
}

TEST(MessagesParse, ToolUseAndToolResultBecomeToolCallsAndToolMessages) {
  auto r = messages(R"({"max_tokens": 5, "tools": [{"name": "get", "description": "d", "input_schema":
      {"type": "object"}}], "tool_choice": {"type": "any", "disable_parallel_tool_use": true}, "messages": [
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "text", "text": "let me look"},
                                        {"type": "tool_use", "id": "t1", "name": "get", "input": {"a": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "r"}]},
                                   {"type": "tool_result", "tool_use_id": "t2", "content": "bad", "is_error": true},
                                   {"type": "text", "text": "and?"}]}]})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  ASSERT_EQ(r->messages.size(), 5u);
  EXPECT_EQ(r->messages[1].role, "assistant");
  EXPECT_EQ(r->messages[1].content, "let me look");
  const auto& call = r->messages[1].extra.at("tool_calls").as_array().at(0).as_object();
  EXPECT_EQ(call.at("id").as_string(), "t1");
  EXPECT_EQ(call.at("function").at("arguments"), json::parse(R"({"a": 1})"));
  EXPECT_EQ(r->messages[2].role, "tool");
  EXPECT_EQ(r->messages[2].content, "r");
  EXPECT_EQ(r->messages[2].extra.at("tool_call_id").as_string(), "t1");
  EXPECT_EQ(r->messages[2].extra.at("name").as_string(), "get");  // from the tool_use it answers
  EXPECT_EQ(r->messages[3].content, "Error: bad");
  EXPECT_FALSE(r->messages[3].extra.contains("name"));
  EXPECT_EQ(r->messages[4].role, "user");
  EXPECT_EQ(r->messages[4].content, "and?");
  ASSERT_EQ(r->tools.size(), 1u);
  EXPECT_EQ(r->tools[0].definition.at("function").at("parameters"), json::parse(R"({"type": "object"})"));
  EXPECT_EQ(r->tool_choice, ApiToolChoice::kRequired);
  EXPECT_FALSE(r->parallel_tool_calls);
}

TEST(MessagesParse, ToolChoiceKinds) {
  const std::string tools = R"("tools": [{"name": "f", "input_schema": {}}], )";
  auto named = messages(R"({"max_tokens": 5, )" + tools + R"("tool_choice": {"type": "tool", "name": "f"}, )" +
                        std::string(kUser) + "}");
  ASSERT_TRUE(named.is_ok()) << named.status().message();
  EXPECT_EQ(named->tool_choice, ApiToolChoice::kNamed);
  EXPECT_EQ(named->tool_choice_name, "f");
  auto none = messages(R"({"max_tokens": 5, )" + tools + R"("tool_choice": {"type": "none"}, )" + std::string(kUser) + "}");
  ASSERT_TRUE(none.is_ok());
  EXPECT_EQ(none->tool_choice, ApiToolChoice::kNone);
  auto plain = messages(R"({"max_tokens": 5, )" + tools + std::string(kUser) + "}");
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->tool_choice, ApiToolChoice::kAuto);
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "tool_choice": {"type": "any"}, )" + std::string(kUser) + "}"),
                      "defines none"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, )" + tools + R"("tool_choice": {"type": "tool"}, )" +
                               std::string(kUser) + "}"),
                      "tool_choice.name is required"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, )" + tools + R"("tool_choice": {"type": "maybe"}, )" +
                               std::string(kUser) + "}"),
                      "tool_choice.type must be"));
}

TEST(MessagesParse, RefusalsNameWhatIsWrong) {
  const std::string u(kUser);
  EXPECT_TRUE(refused(messages("{" + u + "}"), "max_tokens is required"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 0, )" + u + "}"), "max_tokens"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "temperature": 1.2, )" + u + "}"), "between 0 and 1"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "stop_sequences": [""], )" + u + "}"), "must not be empty"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "stop_sequences": "x", )" + u + "}"), "stop_sequences must be"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "container": "c", )" + u + "}"), "container is not supported"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "service_tier": "priority", )" + u + "}"), "service_tier"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "metadata": {"tag": 1}, )" + u + "}"), "metadata.tag"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "n": 2, )" + u + "}"), "unknown field"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": 2000}, )" + u + "}"),
                      "budget_tokens (2000) must be less than max_tokens"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "thinking": {"type": "enabled"}, )" + u + "}"),
                      "budget_tokens is required"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "text",
      "text": "x", "cache_control": {"type": "forever"}}]}]})"),
                      "cache_control.type"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x", "name": "n"}]})"),
                      "unknown field messages[0].name"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type":
      "tool_use", "id": "t", "name": "f"}]}, {"role": "user", "content": "x"}]})"),
                      "input is required"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
      "document", "source": {}}]}]})"),
                      "document is not supported"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": [{"type":
      "redacted_thinking", "data": "hm"}]}, {"role": "user", "content": "x"}]})"),
                      "redacted_thinking is not supported"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type":
      "thinking", "thinking": "hm"}]}]})"),
                      "belong to assistant messages"));
  // count_tokens takes the prompt's fields only.
  EXPECT_TRUE(messages_parse_request("{" + u + "}", true).is_ok());
  EXPECT_TRUE(refused(messages_parse_request(R"({"stream": true, )" + u + "}", true), "unknown field"));
  // Lenient: unknown fields noted, not refused.
  auto lenient = messages_parse_request(R"({"max_tokens": 5, "frob": 1, )" + u + "}", false, {.lenient_fields = true});
  ASSERT_TRUE(lenient.is_ok());
  EXPECT_EQ(lenient->ignored_fields, std::vector<std::string>{"frob"});
}

// A final assistant message is a prefill: its text leaves the messages and the answer
// continues it; tool calls or trailing whitespace there are refused (as Anthropic does).
TEST(MessagesParse, AFinalAssistantMessageIsAPrefill) {
  auto r = messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "Name a colour."},
      {"role": "assistant", "content": [{"type": "text", "text": "The colour is"}]}]})");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  ASSERT_EQ(r->messages.size(), 1u);
  EXPECT_EQ(r->messages[0].role, "user");
  EXPECT_EQ(r->prefill, "The colour is");
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": "ends in a space "}]})"),
                      "trailing whitespace"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
      {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]})"),
                      "tool_use or thinking blocks"));
  EXPECT_TRUE(refused(messages(R"({"max_tokens": 5, "messages": [{"role": "assistant", "content": "x"}]})"),
                      "needs a user message"));
}

TEST(MessagesParse, ThinkingTurnsTheTemplatesSwitchAndBecomesReasoningContent) {
  auto on = messages(R"({"max_tokens": 50, "thinking": {"type": "enabled", "budget_tokens": 20}, "messages": [
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": ""},
                                        {"type": "text", "text": "a"}]},
      {"role": "user", "content": "q2"}]})");
  ASSERT_TRUE(on.is_ok()) << on.status().message();
  EXPECT_TRUE(on->wants_reasoning);
  EXPECT_EQ(on->reasoning_budget, 20);
  EXPECT_EQ(on->template_kwargs.at("enable_thinking"), json::value(true));
  EXPECT_EQ(on->messages[1].extra.at("reasoning_content").as_string(), "hmm");
  EXPECT_EQ(on->messages[1].content, "a");
  auto off = messages(R"({"max_tokens": 5, "thinking": {"type": "disabled"}, )" + std::string(kUser) + "}");
  ASSERT_TRUE(off.is_ok());
  EXPECT_FALSE(off->wants_reasoning);
  EXPECT_EQ(off->template_kwargs.at("enable_thinking"), json::value(false));
}

TEST(ResponsesParse, InputItemsBecomeMessages) {
  auto r = responses(R"({"model": "m", "instructions": "be brief", "input": [
      {"role": "developer", "content": "rules"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
      {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
       "content": [{"type": "output_text", "text": "looking", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get", "arguments": "{\"x\": 2}", "status": "completed"},
      {"type": "function_call", "call_id": "c2", "name": "put", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c1", "output": "one"},
      {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}],
      "max_output_tokens": 20, "temperature": 0.3, "top_p": 0.8, "store": false, "metadata": {"k": "v"},
      "truncation": "disabled", "include": [], "reasoning": null})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->endpoint, ApiEndpoint::kResponses);
  ASSERT_EQ(r->messages.size(), 6u);
  EXPECT_EQ(r->messages[0].role, "system");
  EXPECT_EQ(r->messages[0].content, "be brief");
  EXPECT_EQ(r->messages[1].role, "system");
  EXPECT_EQ(r->messages[2].content, "a\nb");
  EXPECT_EQ(r->messages[3].role, "assistant");
  EXPECT_EQ(r->messages[3].content, "looking");
  const auto& calls = r->messages[3].extra.at("tool_calls").as_array();  // both calls, one turn
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].at("function").at("arguments"), json::parse(R"({"x": 2})"));
  EXPECT_EQ(calls[1].at("id").as_string(), "c2");
  EXPECT_EQ(r->messages[4].role, "tool");
  EXPECT_EQ(r->messages[4].extra.at("name").as_string(), "get");
  EXPECT_EQ(r->messages[5].content, "two");
  EXPECT_EQ(r->max_tokens, 20);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.3f);
  EXPECT_EQ(r->settings.at("metadata"), json::parse(R"({"k": "v"})"));
  EXPECT_EQ(r->settings.at("instructions").as_string(), "be brief");
  EXPECT_EQ(r->settings.at("store"), json::value(false));
}

TEST(ResponsesParse, ReasoningItemsAndEffortNone) {
  auto r = responses(R"({"reasoning": {"effort": "none"}, "input": [{"role": "user", "content": "q"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
      {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "c", "output": "r"}]})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->template_kwargs.at("enable_thinking"), json::value(false));
  EXPECT_EQ(r->messages[1].extra.at("reasoning_content").as_string(), "think");
  EXPECT_TRUE(refused(responses(R"({"input": "x", "reasoning": {"effort": "high"}})"), "reasoning.effort"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "reasoning": {"summary": "auto"}})"), "reasoning.summary"));
  EXPECT_TRUE(refused(responses(R"({"input": [{"type": "reasoning", "encrypted_content": "zz"}, {"role": "user",
      "content": "x"}]})"),
                      "encrypted_content"));
}

TEST(ResponsesParse, ToolsToolChoiceAndTextFormat) {
  auto r = responses(R"({"input": "hi", "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"},
      "strict": true}], "tool_choice": {"type": "function", "name": "f"}, "parallel_tool_calls": false})");
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->tool_choice, ApiToolChoice::kNamed);
  EXPECT_FALSE(r->parallel_tool_calls);
  EXPECT_EQ(r->tools[0].definition.at("function").at("name").as_string(), "f");
  auto schema = responses(R"({"input": "hi", "text": {"format": {"type": "json_schema", "name": "p", "strict": true,
      "schema": {"type": "object"}}}})");
  ASSERT_TRUE(schema.is_ok()) << schema.status().message();
  ASSERT_TRUE(schema->constraint.has_value());
  EXPECT_EQ(schema->constraint->kind, ApiConstraint::Kind::kJsonSchema);
  EXPECT_EQ(schema->constraint->param, "text.format");
  auto object = responses(R"({"input": "hi", "text": {"format": {"type": "json_object"}}})");
  ASSERT_TRUE(object.is_ok());
  EXPECT_EQ(object->constraint->kind, ApiConstraint::Kind::kJsonObject);
  EXPECT_FALSE(responses(R"({"input": "hi", "text": {"format": {"type": "text"}}})")->constraint.has_value());
  EXPECT_TRUE(refused(responses(R"({"input": "hi", "text": {"format": {"type": "json_object"}}, "tools": [{"type":
      "function", "name": "f"}], "tool_choice": "required"})"),
                      "cannot force a tool call"));
}

TEST(ResponsesParse, RefusalsNameWhatIsWrong) {
  EXPECT_TRUE(refused(responses(R"({"input": "x", "store": true})"), "store true"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "previous_response_id": "r"})"), "previous_response_id"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "conversation": "c"})"), "conversation"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "background": true})"), "background true"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "include": ["file_search_call.results"]})"), "include"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "reasoning": {"effort": "low"}})"), "reasoning"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "truncation": "auto"})"), "truncation"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "top_logprobs": 2})"), "top_logprobs"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "tools": [{"type": "file_search"}]})"), "built-in tools"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "tool_choice": {"type": "web_search"}})"), "tool_choice.type"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "metadata": {"k": 1}})"), "metadata.k"));
  EXPECT_TRUE(refused(responses(R"({"input": []})"), "at least one item"));
  EXPECT_TRUE(refused(responses(R"({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]})"),
                      "must be input_text"));
  EXPECT_TRUE(refused(responses(R"({"input": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})"),
                      "assistant"));
  EXPECT_TRUE(refused(responses(R"({"input": [{"type": "item_reference", "id": "x"}]})"), "item_reference"));
  EXPECT_TRUE(refused(responses(R"({"input": [{"type": "function_call_output", "output": "x"}]})"), "call_id"));
  EXPECT_TRUE(refused(responses(R"({"input": "x", "n": 2})"), "unknown field"));
  // The error's param names the Responses field.
  const json::value body = json::parse(api_error_body(responses(R"({"input": "x", "store": true})").status()));
  EXPECT_EQ(body.at("error").at("param").as_string(), "store");
}

ApiResponseHead head() { return {"id-1", 1700000000, "m", "fp"}; }

TEST(DialectBodies, MessagesStopReasonsAndUsage) {
  ApiRequest req;
  req.endpoint = ApiEndpoint::kMessages;
  auto body = [&](DialectResult r) { return json::parse(dialect_response_body(req, head(), r)).as_object(); };
  const ApiUsage usage{.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = 6};
  auto b = body({.text = "hello", .finish_reason = "stop", .usage = usage});
  EXPECT_EQ(b.at("type").as_string(), "message");
  EXPECT_EQ(b.at("stop_reason").as_string(), "end_turn");
  EXPECT_TRUE(b.at("stop_sequence").is_null());
  EXPECT_EQ(b.at("content").at(0).at("text").as_string(), "hello");
  EXPECT_EQ(b.at("usage").at("input_tokens").as_int64(), 4);  // what the cache did not hold
  EXPECT_EQ(b.at("usage").at("cache_read_input_tokens").as_int64(), 6);
  EXPECT_EQ(b.at("usage").at("output_tokens").as_int64(), 4);
  EXPECT_EQ(body({.text = "x", .finish_reason = "stop", .stop_sequence = "END", .usage = usage}).at("stop_sequence").as_string(), "END");
  EXPECT_EQ(body({.text = "x", .finish_reason = "length", .usage = usage}).at("stop_reason").as_string(), "max_tokens");
  auto t = body({.calls = {{"call_1", "get", R"({"a":1})"}}, .finish_reason = "tool_calls", .usage = usage});
  EXPECT_EQ(t.at("stop_reason").as_string(), "tool_use");
  ASSERT_EQ(t.at("content").as_array().size(), 1u);
  EXPECT_EQ(t.at("content").at(0).at("input"), json::parse(R"({"a": 1})"));
  EXPECT_EQ(t.at("content").at(0).at("id").as_string(), "call_1");
}

TEST(DialectBodies, ResponsesStatusOutputAndUsage) {
  auto req = responses(R"({"input": "x", "instructions": "i", "max_output_tokens": 4})");
  ASSERT_TRUE(req.is_ok());
  const ApiUsage usage{.prompt_tokens = 10, .completion_tokens = 4, .cached_tokens = 2};
  auto b = json::parse(dialect_response_body(*req, head(), {.text = "hi", .finish_reason = "length", .usage = usage})).as_object();
  EXPECT_EQ(b.at("object").as_string(), "response");
  EXPECT_EQ(b.at("status").as_string(), "incomplete");
  EXPECT_EQ(b.at("incomplete_details").at("reason").as_string(), "max_output_tokens");
  EXPECT_EQ(b.at("output").at(0).at("content").at(0).at("text").as_string(), "hi");
  EXPECT_EQ(b.at("instructions").as_string(), "i");
  EXPECT_EQ(b.at("usage").at("input_tokens").as_int64(), 10);
  EXPECT_EQ(b.at("usage").at("input_tokens_details").at("cached_tokens").as_int64(), 2);
  EXPECT_EQ(b.at("usage").at("total_tokens").as_int64(), 14);
  auto c = json::parse(dialect_response_body(*req, head(), {.calls = {{"call_1", "f", "{}"}}, .finish_reason = "tool_calls", .usage = usage}))
               .as_object();
  EXPECT_EQ(c.at("status").as_string(), "completed");
  ASSERT_EQ(c.at("output").as_array().size(), 1u);  // no empty message beside the call
  EXPECT_EQ(c.at("output").at(0).at("type").as_string(), "function_call");
  EXPECT_EQ(c.at("output").at(0).at("call_id").as_string(), "call_1");
}

TEST(DialectBodies, ErrorShapes) {
  const Status bad = make_error(ErrorCode::kInvalidArgument, "max_tokens is required");
  auto a = json::parse(dialect_error_body(ApiEndpoint::kMessages, bad)).as_object();
  EXPECT_EQ(a.at("type").as_string(), "error");
  EXPECT_EQ(a.at("error").at("type").as_string(), "invalid_request_error");
  EXPECT_EQ(a.at("error").at("message").as_string(), "max_tokens is required");
  auto busy = json::parse(dialect_error_body(ApiEndpoint::kMessages, make_error(ErrorCode::kResourceExhausted, "busy")));
  EXPECT_EQ(busy.at("error").at("type").as_string(), "rate_limit_error");
  auto down = json::parse(dialect_error_body(ApiEndpoint::kMessages, make_error(ErrorCode::kUnavailable, "down")));
  EXPECT_EQ(down.at("error").at("type").as_string(), "overloaded_error");
  auto key = json::parse(dialect_unauthorized_body(ApiEndpoint::kMessages, "no key"));
  EXPECT_EQ(key.at("error").at("type").as_string(), "authentication_error");
  auto o = json::parse(dialect_error_body(ApiEndpoint::kResponses, bad));
  EXPECT_EQ(o.at("error").at("param").as_string(), "max_tokens");
  EXPECT_EQ(dialect_id_prefix(ApiEndpoint::kMessages), "msg_");
  EXPECT_EQ(dialect_id_prefix(ApiEndpoint::kResponses), "resp_");
}

TEST(EventStreams, MessagesTextThenToolCall) {
  ApiRequest req;
  req.endpoint = ApiEndpoint::kMessages;
  auto s = EventStream::create(req, head());
  s->set_usage({.prompt_tokens = 12, .cached_tokens = 8});
  std::string sse = s->text("Hel");  // one call per statement: the events come in call order
  sse += s->text("");
  sse += s->text("lo");
  sse += s->tool_calls({{"call_1", "get", R"({"city":"Paris"})"}});
  sse += s->finish({.text = "Hello",
                     .calls = {{"call_1", "get", R"({"city":"Paris"})"}},
                     .finish_reason = "tool_calls",
                     .usage = {12, 3, 8}});
  const auto ev = events_of(sse);
  std::vector<std::string> names;
  for (const auto& [name, _] : ev) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"message_start", "ping", "content_block_start", "content_block_delta",
                                             "content_block_delta", "content_block_stop", "content_block_start",
                                             "content_block_delta", "content_block_stop", "message_delta",
                                             "message_stop"}));
  EXPECT_EQ(ev[0].second.at("message").at("usage").at("input_tokens").as_int64(), 4);
  EXPECT_EQ(ev[0].second.at("message").at("usage").at("cache_read_input_tokens").as_int64(), 8);
  EXPECT_EQ(ev[2].second.at("index").as_int64(), 0);
  EXPECT_EQ(ev[4].second.at("delta").at("text").as_string(), "lo");
  EXPECT_EQ(ev[6].second.at("index").as_int64(), 1);
  EXPECT_EQ(ev[6].second.at("content_block").at("name").as_string(), "get");
  EXPECT_EQ(json::parse(ev[7].second.at("delta").at("partial_json").as_string()), json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(ev[9].second.at("delta").at("stop_reason").as_string(), "tool_use");
  EXPECT_EQ(ev[9].second.at("usage").at("output_tokens").as_int64(), 3);
  const auto err = events_of(s->error(make_error(ErrorCode::kUnavailable, "gone")));
  ASSERT_EQ(err.size(), 1u);
  EXPECT_EQ(err[0].first, "error");
  EXPECT_EQ(err[0].second.at("error").at("type").as_string(), "overloaded_error");
}

TEST(EventStreams, ReasoningComesFirstInItsOwnBlockAndItem) {
  ApiRequest m;
  m.endpoint = ApiEndpoint::kMessages;
  auto s = EventStream::create(m, head());
  std::string sse = s->reasoning("hm");
  sse += s->text("A");
  sse += s->finish({.text = "A", .reasoning = "hm", .finish_reason = "stop", .usage = {3, 2, 0, 1}});
  auto ev = events_of(sse);
  ASSERT_GE(ev.size(), 9u);
  EXPECT_EQ(ev[2].second.at("content_block").at("type").as_string(), "thinking");
  EXPECT_EQ(ev[3].second.at("delta").at("type").as_string(), "thinking_delta");
  EXPECT_EQ(ev[3].second.at("delta").at("thinking").as_string(), "hm");
  EXPECT_EQ(ev[4].first, "content_block_stop");
  EXPECT_EQ(ev[5].second.at("index").as_int64(), 1);
  EXPECT_EQ(ev[5].second.at("content_block").at("type").as_string(), "text");
  auto body = json::parse(dialect_response_body(m, head(), {.text = "A", .reasoning = "hm", .finish_reason = "stop"}));
  EXPECT_EQ(body.at("content").at(0).at("type").as_string(), "thinking");
  EXPECT_EQ(body.at("content").at(1).at("text").as_string(), "A");

  auto req = responses(R"({"input": "x"})");
  ASSERT_TRUE(req.is_ok());
  auto r = EventStream::create(*req, head());
  sse = r->reasoning("hm");
  sse += r->text("A");
  sse += r->finish({.text = "A", .reasoning = "hm", .finish_reason = "stop", .usage = {3, 2, 0, 1}});
  ev = events_of(sse);
  EXPECT_EQ(ev[2].second.at("item").at("type").as_string(), "reasoning");
  EXPECT_EQ(ev[3].first, "response.reasoning_text.delta");
  EXPECT_EQ(ev[4].first, "response.reasoning_text.done");
  EXPECT_EQ(ev[4].second.at("text").as_string(), "hm");
  EXPECT_EQ(ev[6].second.at("output_index").as_int64(), 1);
  const auto& done = ev.back().second.at("response");
  EXPECT_EQ(done.at("output").at(0).at("content").at(0).at("text").as_string(), "hm");
  EXPECT_EQ(done.at("usage").at("output_tokens_details").at("reasoning_tokens").as_int64(), 1);
}

TEST(EventStreams, MessagesThatSayNothingStillStartAndStop) {
  ApiRequest req;
  req.endpoint = ApiEndpoint::kMessages;
  auto s = EventStream::create(req, head());
  const auto ev = events_of(s->finish({.text = "", .finish_reason = "stop", .usage = {3, 1, 0}}));
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].first, "message_start");
  EXPECT_EQ(ev[2].second.at("delta").at("stop_reason").as_string(), "end_turn");
  EXPECT_EQ(ev[3].first, "message_stop");
}

TEST(EventStreams, ResponsesItemsAndSequenceNumbers) {
  auto req = responses(R"({"input": "x"})");
  ASSERT_TRUE(req.is_ok());
  auto s = EventStream::create(*req, head());
  std::string sse = s->text("a");
  sse += s->text("b");
  sse += s->tool_calls({{"call_1", "f", R"({"x":1})"}});
  sse += s->finish(
      {.text = "ab", .calls = {{"call_1", "f", R"({"x":1})"}}, .finish_reason = "tool_calls", .usage = {5, 3, 0}});
  const auto ev = events_of(sse);
  for (size_t i = 0; i < ev.size(); ++i) EXPECT_EQ(ev[i].second.at("sequence_number").as_int64(), static_cast<int64_t>(i));
  std::vector<std::string> names;
  for (const auto& [name, _] : ev) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "response.created", "response.in_progress", "response.output_item.added",
                       "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                       "response.output_text.done", "response.content_part.done", "response.output_item.done",
                       "response.output_item.added", "response.function_call_arguments.delta",
                       "response.function_call_arguments.done", "response.output_item.done", "response.completed"}));
  EXPECT_EQ(ev[6].second.at("text").as_string(), "ab");
  EXPECT_EQ(ev[9].second.at("output_index").as_int64(), 1);
  const auto& done = ev.back().second.at("response").as_object();
  EXPECT_EQ(done.at("status").as_string(), "completed");
  ASSERT_EQ(done.at("output").as_array().size(), 2u);
  // The final output's items are the ones streamed, with their ids.
  EXPECT_EQ(done.at("output").at(0).at("id"), ev[2].second.at("item").at("id"));
  EXPECT_EQ(done.at("output").at(1).at("arguments").as_string(), R"({"x":1})");
  EXPECT_EQ(done.at("usage").at("output_tokens").as_int64(), 3);
}

}  // namespace
}  // namespace hearth
