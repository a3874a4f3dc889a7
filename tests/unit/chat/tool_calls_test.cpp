// Tool-call formats: detection from templates, parsing of recorded model outputs, the
// same calls streamed in any split, and the built-in templates round-tripping tools,
// calls and results.
#include "chat/tool_calls.h"

#include <fstream>
#include <random>

#include <boost/json.hpp>
#include <gtest/gtest.h>

#include "chat/builtin_templates.h"
#include "chat/chat_template.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

namespace json = boost::json;

struct Parsed {
  std::string content;
  std::vector<ToolCall> calls;
};

Parsed parse_whole(ToolCallFormat f, std::string_view text) {
  ToolCallParser p(f);
  Parsed out;
  out.content = p.push(text, out.calls);
  out.content += p.finish(out.calls);
  return out;
}

// The same output pushed in random pieces (as tokens arrive).
Parsed parse_streamed(ToolCallFormat f, std::string_view text, std::mt19937_64& rng) {
  ToolCallParser p(f);
  Parsed out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = std::uniform_int_distribution<size_t>(1, 5)(rng);
    out.content += p.push(text.substr(i, n), out.calls);
    i += n;
  }
  out.content += p.finish(out.calls);
  return out;
}

struct Recorded {
  ToolCallFormat format;
  std::string output;
  std::string content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments (compact JSON)
};

// Outputs in the shapes each family's models write (whitespace, several calls, text
// around them, and outputs that only look like calls).
const std::vector<Recorded> kRecorded = {
    {ToolCallFormat::kHermes,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
     "",
     {{"get_weather", R"({"city":"Paris","unit":"c"})"}}},
    {ToolCallFormat::kHermes,
     "Let me check both.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": "
     "\"b\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>",
     "Let me check both.\n",
     {{"a", "{}"}, {"b", R"({"x":[1,2]})"}}},
    {ToolCallFormat::kHermes, "I use <tool_call> tags, like <tool_call>oops</tool_call>.",
     "I use <tool_call> tags, like <tool_call>oops</tool_call>.", {}},
    {ToolCallFormat::kHermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": \"{\\\"q\\\": 1}\"}", "", {{"f", R"({"q":1})"}}},
    {ToolCallFormat::kHermes, "No tools needed: 2 + 2 = 4.", "No tools needed: 2 + 2 = 4.", {}},
    {ToolCallFormat::kLlama3Json, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}", "",
     {{"get_weather", R"({"city":"Oslo"})"}}},
    {ToolCallFormat::kLlama3Json,
     "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {}}", "",
     {{"a", R"({"n":1})"}, {"b", "{}"}}},
    {ToolCallFormat::kLlama3Json, "  {\"answer\": 42}", "  {\"answer\": 42}", {}},
    {ToolCallFormat::kLlama3Json, "The weather in Oslo is mild.", "The weather in Oslo is mild.", {}},
    {ToolCallFormat::kMistral,
     "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}, {\"name\": \"get_time\", "
     "\"arguments\": {}}]",
     "",
     {{"get_weather", R"({"city":"Rome"})"}, {"get_time", "{}"}}},
    {ToolCallFormat::kMistral, " [{\"name\": \"f\", \"arguments\": {\"a\": true}, \"id\": \"abcDEF123\"}]", "",
     {{"f", R"({"a":true})"}}},
    {ToolCallFormat::kMistral, "[1, 2, 3] are numbers.", "[1, 2, 3] are numbers.", {}},
    {ToolCallFormat::kMistral, "[{\"name\": \"f\"", "[{\"name\": \"f\"", {}},
};

TEST(ToolCallsTest, RecordedOutputsParseStreamedOrNot) {
  std::mt19937_64 rng(std::random_device{}());
  for (const Recorded& r : kRecorded) {
    SCOPED_TRACE(r.output);
    const Parsed whole = parse_whole(r.format, r.output);
    EXPECT_EQ(whole.content, r.content);
    ASSERT_EQ(whole.calls.size(), r.calls.size());
    for (size_t i = 0; i < r.calls.size(); ++i) {
      EXPECT_EQ(whole.calls[i].name, r.calls[i].first);
      EXPECT_EQ(whole.calls[i].arguments, r.calls[i].second);
    }
    for (int k = 0; k < 20; ++k) {
      const Parsed s = parse_streamed(r.format, r.output, rng);
      EXPECT_EQ(s.content, whole.content);
      ASSERT_EQ(s.calls.size(), whole.calls.size());
      for (size_t i = 0; i < s.calls.size(); ++i) {
        EXPECT_EQ(s.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments);
      }
    }
  }
}

TEST(ToolCallsTest, ContentBeforeAHermesCallStreamsAtOnce) {
  ToolCallParser p(ToolCallFormat::kHermes);
  std::vector<ToolCall> calls;
  EXPECT_EQ(p.push("Checking", calls), "Checking");
  EXPECT_EQ(p.push(" now <tool", calls), " now ");  // "<tool" may begin a call
  EXPECT_EQ(p.push("_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>", calls), "");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(p.finish(calls), "");
}

TEST(ToolCallsTest, FormatsAreReadFromTemplatesAndNames) {
  EXPECT_EQ(tool_call_format_detect(*builtin_chat_template("chatml")), ToolCallFormat::kHermes);
  EXPECT_EQ(tool_call_format_detect(*builtin_chat_template("llama3")), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(tool_call_format_detect(*builtin_chat_template("mistral")), ToolCallFormat::kMistral);
  EXPECT_EQ(tool_call_format_detect(*builtin_chat_template("llama2")), ToolCallFormat::kNone);
  EXPECT_EQ(tool_call_format_detect(*builtin_chat_template("zephyr")), ToolCallFormat::kNone);
  const auto qwen = testing::shared_path("tokenizers/chat_templates/qwen2.5-instruct.tokenizer_config.json");
  if (std::filesystem::exists(qwen)) {
    std::ifstream in(qwen);
    const json::value cfg = json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
    EXPECT_EQ(tool_call_format_detect(cfg.at("chat_template").as_string()), ToolCallFormat::kHermes);
  }
  EXPECT_EQ(*tool_call_format_from_name("hermes"), ToolCallFormat::kHermes);
  EXPECT_EQ(*tool_call_format_from_name("llama3_json"), ToolCallFormat::kLlama3Json);
  EXPECT_EQ(*tool_call_format_from_name("mistral"), ToolCallFormat::kMistral);
  EXPECT_FALSE(tool_call_format_from_name("xml").is_ok());
}

// Tools, an assistant's calls and the tool's answer go through each built-in template
// that takes tools, in its own format; the others render plain conversations.
TEST(BuiltinTemplatesTest, ToolsCallsAndResultsRoundTrip) {
  const json::array tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Weather now", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])")
                                .as_array();
  ChatTemplateInputs in;
  in.bos_token = "<s>";
  in.eos_token = "</s>";
  in.messages.push_back({"system", "Be brief.", {}});
  in.messages.push_back({"user", "Weather in Paris?", {}});
  ChatMessage call{"assistant", "", {}};
  call.extra["tool_calls"] = json::parse(
      R"([{"id": "abcDEF123", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])");
  in.messages.push_back(call);
  ChatMessage result{"tool", "18 C and sunny", {}};
  result.extra["tool_call_id"] = "abcDEF123";
  in.messages.push_back(result);
  in.extra["tools"] = tools;
  struct Case {
    const char* name;
    std::vector<std::string> expect;
  };
  for (const Case& c : std::vector<Case>{
           {"chatml",
            {"<|im_start|>system\nBe brief.\n\n", "<tools>\n{\"type\": \"function\"", "<|im_start|>user\nWeather in Paris?<|im_end|>",
             "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>",
             "<tool_response>\n18 C and sunny\n</tool_response>", "<|im_start|>assistant\n"}},
           {"llama3",
            {"<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.\n\n", "\"name\": \"get_weather\"",
             "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}<|eot_id|>",
             "<|start_header_id|>ipython<|end_header_id|>\n\n18 C and sunny<|eot_id|>",
             "<|start_header_id|>assistant<|end_header_id|>\n\n"}},
           {"mistral",
            {"[AVAILABLE_TOOLS] [{\"type\": \"function\"", "[INST] Be brief.\n\nWeather in Paris?[/INST]",
             "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abcDEF123\"}]</s>",
             "[TOOL_RESULTS] {\"content\": \"18 C and sunny\", \"call_id\": \"abcDEF123\"}[/TOOL_RESULTS]"}},
       }) {
    auto t = ChatTemplate::parse(*builtin_chat_template(c.name));
    ASSERT_TRUE(t.is_ok()) << c.name << ": " << t.status().message();
    auto text = t->render(in);
    ASSERT_TRUE(text.is_ok()) << c.name << ": " << text.status().message();
    for (const std::string& e : c.expect) EXPECT_NE(text->find(e), std::string::npos) << c.name << ":\n" << *text << "\nlacks: " << e;
  }
  ChatTemplateInputs plain;
  plain.bos_token = "<s>";
  plain.eos_token = "</s>";
  plain.messages = {{"system", "Sys.", {}}, {"user", "Hi", {}}, {"assistant", "Hello", {}}, {"user", "Bye", {}}};
  const std::pair<const char*, const char*> expected[] = {
      {"chatml", "<|im_start|>system\nSys.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
                 "<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
      {"llama2", "<s>[INST] <<SYS>>\nSys.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]"},
      {"zephyr", "<|system|>\nSys.</s>\n<|user|>\nHi</s>\n<|assistant|>\nHello</s>\n<|user|>\nBye</s>\n<|assistant|>\n"},
      {"llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nSys.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                 "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>user<|"
                 "end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"mistral", "<s>[INST] Sys.\n\nHi[/INST]Hello</s>[INST] Bye[/INST]"},
  };
  for (const auto& [name, want] : expected) {
    auto text = ChatTemplate::parse(*builtin_chat_template(name))->render(plain);
    ASSERT_TRUE(text.is_ok()) << name << ": " << text.status().message();
    EXPECT_EQ(*text, want) << name;
  }
  EXPECT_EQ(builtin_chat_template_names().size(), 5u);
  EXPECT_FALSE(builtin_chat_template("vicuna").has_value());
}

}  // namespace
}  // namespace hearth
