// Prompts: fill-in-the-middle in the model's own tokens, chat templates chosen by flag,
// and the 400s for chat without a template or tools without a format.
#include "frontend/prompt.h"

#include <fstream>

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

std::unique_ptr<Tokenizer> load(const std::string& relative) {
  auto source = tokenizer_source_from_path(shared_path(relative));
  if (!source.is_ok()) return nullptr;
  auto t = tokenizer_load(*source);
  return t.is_ok() ? std::move(t).value() : nullptr;
}

ApiRequest parse(std::string_view body, ApiEndpoint e) { return std::move(api_parse_request(body, e)).value(); }

TEST(PromptTest, SuffixBuildsTheModelsFillInTheMiddlePrompt) {
  HEARTH_REQUIRE_SHARED(shared_path("tokenizers/qwen3/qwen3-4b.tokenizer.json"));
  auto t = load("tokenizers/qwen3/qwen3-4b.tokenizer.json");
  ASSERT_NE(t, nullptr);
  const auto fim = fim_tokens_find(*t);
  ASSERT_TRUE(fim.has_value());
  EXPECT_EQ(t->piece(fim->prefix), "<|fim_prefix|>");
  auto b = PromptBuilder::create(*t, "", {});
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  auto p = b->build(parse(R"({"prompt": "def add(a, b):\n", "suffix": "\n    return c"})", ApiEndpoint::kCompletions));
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  const auto prefix = t->encode("def add(a, b):\n", {false, false}).value();
  const auto suffix = t->encode("\n    return c", {false, false}).value();
  std::vector<TokenId> want{fim->prefix};
  want.insert(want.end(), prefix.begin(), prefix.end());
  want.push_back(fim->suffix);
  want.insert(want.end(), suffix.begin(), suffix.end());
  want.push_back(fim->middle);
  EXPECT_EQ(p->ids, want);
  EXPECT_EQ(p->echo_text, "def add(a, b):\n");
  // Token ids cannot be split around a suffix.
  EXPECT_FALSE(b->build(parse(R"({"prompt": [1, 2], "suffix": "x"})", ApiEndpoint::kCompletions)).is_ok());
}

TEST(PromptTest, AVocabularyWithoutFimTokensRefusesSuffix) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/tok512.model"));
  auto t = load("models/stories260K/tok512.model");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(fim_tokens_find(*t).has_value());
  auto b = PromptBuilder::create(*t, "", {});
  auto p = b->build(parse(R"({"prompt": "a", "suffix": "b"})", ApiEndpoint::kCompletions));
  EXPECT_EQ(p.status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(api_status_of(p.status()), 400);
  EXPECT_TRUE(p.status().message().starts_with("suffix")) << p.status().message();
}

// A Messages prefill follows the generation prompt; whether the answer starts inside the
// reasoning is the template's say (it opened <think>) unless the prefill's last tag says
// otherwise.
TEST(PromptTest, APrefillFollowsTheGenerationPromptAndItsTagsDecideTheReasoning) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/tok512.model"));
  auto t = load("models/stories260K/tok512.model");
  auto opens = PromptBuilder::create(*t, "{{ messages[0].content }}|<think>\n", {});
  auto plain = PromptBuilder::create(*t, "{{ messages[0].content }}|", {});
  ASSERT_TRUE(opens.is_ok() && plain.is_ok());
  ApiRequest req = parse(R"({"messages": [{"role": "user", "content": "Hi"}]})", ApiEndpoint::kChatCompletions);
  req.prefill = "So";
  auto p = opens->build(req);
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  const std::string text = t->decode(p->ids);  // (this vocabulary has no newline)
  EXPECT_TRUE(text.starts_with("Hi|<think>") && text.ends_with("So")) << text;
  EXPECT_TRUE(p->opens_reasoning);  // the prefill is inside the reasoning the template opened
  req.prefill = "So</think>The answer";
  EXPECT_FALSE(opens->build(req)->opens_reasoning);
  EXPECT_FALSE(plain->build(req)->opens_reasoning);
  req.prefill = "<think>Let me";
  EXPECT_TRUE(plain->build(req)->opens_reasoning);
  req.prefill = "";
  EXPECT_FALSE(plain->build(req)->opens_reasoning);
  EXPECT_TRUE(opens->build(req)->opens_reasoning);
}

TEST(PromptTest, TemplatesComeFromFlagsAndChatWithoutOneIsRefused) {
  HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/tok512.model"));
  auto t = load("models/stories260K/tok512.model");
  const ApiRequest chat = parse(R"({"messages": [{"role": "user", "content": "Hi"}]})", ApiEndpoint::kChatCompletions);
  auto bare = PromptBuilder::create(*t, "", {});
  ASSERT_TRUE(bare.is_ok());
  EXPECT_FALSE(bare->has_chat_template());
  auto refused = bare->build(chat);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("--chat-template"), std::string::npos);
  auto chatml = PromptBuilder::create(*t, "", {.chat_template = "chatml"});
  ASSERT_TRUE(chatml.is_ok());
  EXPECT_EQ(chatml->tool_format(), ToolCallFormat::kHermes);
  auto p = chatml->build(chat);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(t->decode(p->ids), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // The model's own template is used unless a flag replaces it; a file works too.
  auto own = PromptBuilder::create(*t, "{{ messages[0].content }}!", {});
  EXPECT_EQ(t->decode(own->build(chat)->ids), "Hi!");
  testing::TempDir dir;
  const auto file = dir.path() / "t.jinja";
  std::ofstream(file) << "[{{ messages[0].content }}]";
  auto from_file = PromptBuilder::create(*t, "{{ x }}", {.chat_template = file.string()});
  ASSERT_TRUE(from_file.is_ok());
  EXPECT_EQ(t->decode(from_file->build(chat)->ids), "[Hi]");
  EXPECT_EQ(PromptBuilder::create(*t, "", {.chat_template = "nope"}).status().code(), ErrorCode::kNotFound);
  std::ofstream(file) << "{% if %}";
  EXPECT_FALSE(PromptBuilder::create(*t, "", {.chat_template = file.string()}).is_ok());
  EXPECT_FALSE(PromptBuilder::create(*t, "", {.tool_call_parser = "xml"}).is_ok());
  // Tools need a tool format: zephyr has none, unless --tool-call-parser names one.
  const ApiRequest tools = parse(R"({"messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"name": "f"}}]})", ApiEndpoint::kChatCompletions);
  auto zephyr = PromptBuilder::create(*t, "", {.chat_template = "zephyr"});
  EXPECT_EQ(zephyr->build(tools).status().code(), ErrorCode::kUnsupported);
  auto named = PromptBuilder::create(*t, "", {.chat_template = "zephyr", .tool_call_parser = "hermes"});
  EXPECT_TRUE(named->build(tools).is_ok());
}

}  // namespace
}  // namespace hearth
