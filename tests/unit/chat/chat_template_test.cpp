// ChatTemplate: llama.cpp's chat-template cases, the real templates in the shared folder,
// Jinja2 semantics (expected strings are what Jinja2 with Hugging Face's settings
// renders), error reporting and hostile templates.
#include "chat/chat_template.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "common/json.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

boost::json::object read_json_object(const std::filesystem::path& path) {
  auto parsed = json_parse(read_file(path), path.filename().string());
  EXPECT_TRUE(parsed.is_ok()) << parsed.status().to_string();
  if (!parsed.is_ok() || !parsed->is_object()) return {};
  return parsed->as_object();
}

std::string json_string_or_empty(const boost::json::object& obj, std::string_view key) {
  const auto* v = obj.if_contains(key);
  if (v == nullptr) return "";
  if (v->is_string()) return std::string(v->get_string());
  // tokenizer_config.json may spell a token as {"content": "<s>", ...}.
  if (v->is_object()) return json_string_or_empty(v->get_object(), "content");
  return "";
}

std::vector<ChatMessage> messages_from_json(const boost::json::array& array) {
  std::vector<ChatMessage> messages;
  for (const auto& item : array) {
    const auto& obj = item.as_object();
    ChatMessage m;
    for (const auto& kv : obj) {
      if (kv.key() == "role" && kv.value().is_string()) {
        m.role = std::string(kv.value().get_string());
      } else if (kv.key() == "content" && kv.value().is_string()) {
        m.content = std::string(kv.value().get_string());
      } else {
        m.extra[kv.key()] = kv.value();
      }
    }
    messages.push_back(std::move(m));
  }
  return messages;
}

// The conversation every llama.cpp case renders.
std::vector<ChatMessage> reference_conversation() {
  return {
      {"system", "You are a helpful assistant", {}},
      {"user", "Hello", {}},
      {"assistant", "Hi there", {}},
      {"user", "Who are you", {}},
      {"assistant", "   I am an assistant   ", {}},
      {"user", "Another question", {}},
  };
}

ChatTemplateInputs inputs_with(std::vector<ChatMessage> messages) {
  ChatTemplateInputs in;
  in.messages = std::move(messages);
  return in;
}

Result<std::string> render_source(std::string_view source, const ChatTemplateInputs& inputs,
                                  const ChatTemplateLimits& limits = {}) {
  HEARTH_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  return tmpl.render(inputs, limits);
}

Result<std::string> render_source(std::string_view source) {
  return render_source(source, inputs_with(reference_conversation()));
}

// ---- llama.cpp's cases ------------------------------------------------------------------

TEST(ChatTemplateCases, LlamaCppCases) {
  const auto path = shared_path("tokenizers/chat_templates/llamacpp-test-chat-template.cases.json");
  HEARTH_REQUIRE_SHARED(path);
  const boost::json::object doc = read_json_object(path);
  ASSERT_TRUE(doc.contains("cases"));
  const std::vector<ChatMessage> conversation = messages_from_json(doc.at("conversation").as_array());
  ASSERT_EQ(conversation.size(), 6u);
  size_t match = 0, match_total = 0, raises = 0, raises_total = 0, differs = 0, differs_total = 0;
  for (const auto& item : doc.at("cases").as_array()) {
    const auto& c = item.as_object();
    const std::string name = json_string_or_empty(c, "name");
    const std::string check = json_string_or_empty(c, "check_python_jinja2_hf_style");
    SCOPED_TRACE(name);
    ChatTemplateInputs in = inputs_with(conversation);
    in.add_generation_prompt = true;
    in.bos_token = json_string_or_empty(c, "bos_token");
    in.eos_token = json_string_or_empty(c, "eos_token");
    auto tmpl = ChatTemplate::parse(json_string_or_empty(c, "template_str"));
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
    const auto out = tmpl->render(in);
    std::string expected = json_string_or_empty(c, "expected_output_jinja");
    if (expected.empty()) expected = json_string_or_empty(c, "expected_output");
    if (check == "match" || check == "match_after_stripping_leading_bos") {
      ++match_total;
      if (!out.is_ok()) {
        ADD_FAILURE() << out.status().to_string();
        continue;
      }
      std::string text = *out;
      if (check != "match" && !in.bos_token.empty() && text.rfind(in.bos_token, 0) == 0) {
        text.erase(0, in.bos_token.size());
      }
      EXPECT_EQ(text, expected);
      if (text == expected) ++match;
    } else if (check.rfind("raises: ", 0) == 0) {
      ++raises_total;
      const std::string message = check.substr(8);
      if (out.is_ok()) {
        ADD_FAILURE() << "rendered instead of raising: " << *out;
        continue;
      }
      EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(out.status().message().find(message), std::string::npos) << out.status().to_string();
      if (out.status().message().find(message) != std::string::npos) ++raises;
    } else {
      ASSERT_EQ(check, "differs");
      ++differs_total;
      EXPECT_TRUE(out.is_ok()) << out.status().to_string();
      if (out.is_ok()) ++differs;
    }
  }
  std::printf("[chat templates] match %zu/%zu, raises %zu/%zu, differs rendered %zu/%zu\n", match, match_total, raises,
              raises_total, differs, differs_total);
  EXPECT_EQ(match_total + raises_total + differs_total, doc.at("cases").as_array().size());
  EXPECT_GT(match_total, 0u);
  EXPECT_GT(raises_total, 0u);
  EXPECT_EQ(match, match_total);
  EXPECT_EQ(raises, raises_total);
  EXPECT_EQ(differs, differs_total);
}

// ---- the real templates -------------------------------------------------------------------

struct RealTemplate {
  std::string name;
  std::string source;
  std::string bos, eos;
};

// Every chat template in the shared folder: tokenizer_config.json files ("chat_template"
// as a string or a list of {name, template}: "default" or the first) and .jinja files.
std::vector<RealTemplate> real_templates() {
  std::vector<std::filesystem::path> configs;
  const auto dir = shared_path("tokenizers/chat_templates");
  if (std::filesystem::exists(dir)) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      const std::string file = entry.path().filename().string();
      if (file.size() > 22 && file.substr(file.size() - 22) == ".tokenizer_config.json")
        configs.push_back(entry.path());
    }
  }
  for (const char* rel :
       {"tokenizers/llama3/meta-llama-3-8b.tokenizer_config.json", "tokenizers/qwen3/qwen3-4b.tokenizer_config.json",
        "tokenizers/smollm/SmolLM-135M-ft.tokenizer_config.json"}) {
    if (std::filesystem::exists(shared_path(rel))) configs.push_back(shared_path(rel));
  }
  std::sort(configs.begin(), configs.end());
  std::vector<RealTemplate> out;
  for (const auto& path : configs) {
    const boost::json::object config = read_json_object(path);
    const auto* t = config.if_contains("chat_template");
    if (t == nullptr || t->is_null()) continue;  // SmolLM-135M ships none
    RealTemplate rt;
    rt.name = path.filename().string();
    if (t->is_string()) {
      rt.source = std::string(t->get_string());
    } else if (t->is_array() && !t->get_array().empty()) {
      const auto& list = t->get_array();
      rt.source = json_string_or_empty(list[0].as_object(), "template");
      for (const auto& entry : list) {
        if (json_string_or_empty(entry.as_object(), "name") == "default") {
          rt.source = json_string_or_empty(entry.as_object(), "template");
        }
      }
    }
    rt.bos = json_string_or_empty(config, "bos_token");
    rt.eos = json_string_or_empty(config, "eos_token");
    out.push_back(std::move(rt));
  }
  const auto jinja = shared_path("tokenizers/chat_templates/smollm3.chat_template.jinja");
  if (std::filesystem::exists(jinja)) out.push_back({jinja.filename().string(), read_file(jinja), "", ""});
  return out;
}

const RealTemplate* find_template(const std::vector<RealTemplate>& all, std::string_view file) {
  for (const auto& t : all) {
    if (t.name == file) return &t;
  }
  return nullptr;
}

TEST(ChatTemplateReal, EveryTemplateParsesAndRenders) {
  HEARTH_REQUIRE_SHARED(shared_path("tokenizers/chat_templates"));
  const auto all = real_templates();
  ASSERT_GE(all.size(), 10u);
  // Templates that refuse a system message say so; every template renders the
  // conversation without one.
  const std::map<std::string, std::string> refuses_system = {
      {"gemma-it.tokenizer_config.json", "System role not supported"},
      {"mistral-7b-instruct-v0.1.tokenizer_config.json", "Conversation roles must alternate"},
  };
  std::vector<ChatMessage> no_system = reference_conversation();
  no_system.erase(no_system.begin());
  size_t rendered = 0;
  for (const auto& t : all) {
    SCOPED_TRACE(t.name);
    auto tmpl = ChatTemplate::parse(t.source);
    ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
    ChatTemplateInputs in = inputs_with(reference_conversation());
    in.bos_token = t.bos;
    in.eos_token = t.eos;
    const auto full = tmpl->render(in);
    const auto refusal = refuses_system.find(t.name);
    if (refusal == refuses_system.end()) {
      ASSERT_TRUE(full.is_ok()) << full.status().to_string();
      EXPECT_NE(full->find("Another question"), std::string::npos) << *full;
    } else {
      ASSERT_FALSE(full.is_ok());
      EXPECT_EQ(full.status().message().rfind(refusal->second, 0), 0u) << full.status().to_string();
    }
    in.messages = no_system;
    const auto partial = tmpl->render(in);
    ASSERT_TRUE(partial.is_ok()) << partial.status().to_string();
    EXPECT_NE(partial->find("Who are you"), std::string::npos) << *partial;
    ++rendered;
  }
  std::printf("[chat templates] %zu real templates parsed and rendered\n", rendered);
}

// Llama 3 instruct: "<|begin_of_text|>" once, then per message
// "<|start_header_id|>ROLE<|end_header_id|>\n\n" + trimmed content + "<|eot_id|>", then the
// assistant header as the generation prompt.
TEST(ChatTemplateReal, Llama3InstructExact) {
  HEARTH_REQUIRE_SHARED(shared_path("tokenizers/chat_templates"));
  const auto all = real_templates();
  const RealTemplate* t = find_template(all, "llama-3-instruct.tokenizer_config.json");
  ASSERT_NE(t, nullptr);
  ChatTemplateInputs in = inputs_with(reference_conversation());
  in.bos_token = "<|begin_of_text|>";
  in.eos_token = "<|eot_id|>";
  const std::string expected =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n";
  auto out = render_source(t->source, in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected);
  in.add_generation_prompt = false;
  out = render_source(t->source, in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected.substr(
                      0, expected.size() - std::string("<|start_header_id|>assistant<|end_header_id|>\n\n").size()));
}

// ChatML: "<|im_start|>ROLE\n" + content (untouched) + "<|im_end|>\n" per message.
TEST(ChatTemplateReal, ChatMlExact) {
  HEARTH_REQUIRE_SHARED(shared_path("tokenizers/chat_templates"));
  const auto all = real_templates();
  const RealTemplate* t = find_template(all, "chatml-openhermes.tokenizer_config.json");
  ASSERT_NE(t, nullptr);
  const std::string expected =
      "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
      "<|im_start|>user\nHello<|im_end|>\n"
      "<|im_start|>assistant\nHi there<|im_end|>\n"
      "<|im_start|>user\nWho are you<|im_end|>\n"
      "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
      "<|im_start|>user\nAnother question<|im_end|>\n"
      "<|im_start|>assistant\n";
  const auto out = render_source(t->source, inputs_with(reference_conversation()));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, expected);
}

// Qwen2.5: ChatML with a default system prompt, and tools described in the system turn as
// one json.dumps line each; tool calls and results in <tool_call>/<tool_response> tags.
TEST(ChatTemplateReal, Qwen25Exact) {
  HEARTH_REQUIRE_SHARED(shared_path("tokenizers/chat_templates"));
  const auto all = real_templates();
  const RealTemplate* t = find_template(all, "qwen2.5-instruct.tokenizer_config.json");
  ASSERT_NE(t, nullptr);
  auto tmpl = ChatTemplate::parse(t->source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();

  auto out = tmpl->render(inputs_with(reference_conversation()));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\nHi there<|im_end|>\n"
            "<|im_start|>user\nWho are you<|im_end|>\n"
            "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n"
            "<|im_start|>user\nAnother question<|im_end|>\n"
            "<|im_start|>assistant\n");

  out = tmpl->render(inputs_with({{"user", "Hello", {}}}));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
            "<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");

  ChatTemplateInputs in;
  ChatMessage call{"assistant", "", {}};
  call.extra["tool_calls"] = boost::json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])");
  in.messages = {{"user", "Weather in Paris?", {}}, call, {"tool", "{\"temp\": 21}", {}}};
  in.extra["tools"] = boost::json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  out = tmpl->render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n\n"
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
            "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Get the weather\", "
            "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, "
            "\"required\": [\"city\"]}}}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
            "<args-json-object>}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
            "</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
}

// Qwen3: reasoning of earlier turns dropped, the last turn's kept (from <think> tags or
// the reasoning_content field), and enable_thinking=false pre-fills an empty think block.
TEST(ChatTemplateReal, Qwen3Thinking) {
  const auto path = shared_path("tokenizers/qwen3/qwen3-4b.tokenizer_config.json");
  HEARTH_REQUIRE_SHARED(path);
  const auto all = real_templates();
  const RealTemplate* t = find_template(all, "qwen3-4b.tokenizer_config.json");
  ASSERT_NE(t, nullptr);
  auto tmpl = ChatTemplate::parse(t->source);
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();

  ChatTemplateInputs in =
      inputs_with({{"user", "2+2?", {}}, {"assistant", "<think>\nadd them\n</think>\n\n4", {}}, {"user", "3+3?", {}}});
  in.extra["enable_thinking"] = false;
  auto out = tmpl->render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"
            "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");

  ChatMessage answer{"assistant", "6", {}};
  answer.extra["reasoning_content"] = "add again";
  in = inputs_with({{"user", "3+3?", {}}, answer});
  in.add_generation_prompt = false;
  out = tmpl->render(in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out,
            "<|im_start|>user\n3+3?<|im_end|>\n<|im_start|>assistant\n<think>\nadd again\n</think>\n\n6<|im_end|>\n");
}

// SmolLM3 reads strftime_now() and wraps assistant turns in {% generation %}.
TEST(ChatTemplateReal, SmolLM3) {
  const auto path = shared_path("tokenizers/chat_templates/smollm3.chat_template.jinja");
  HEARTH_REQUIRE_SHARED(path);
  const auto out = render_source(read_file(path), inputs_with(reference_conversation()));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  const std::regex header(
      "^<\\|im_start\\|>system\n## Metadata\n\nKnowledge Cutoff Date: June 2025\nToday Date: \\d{2} [A-Z][a-z]+ "
      "\\d{4}\nReasoning Mode: /think\n\n## Custom Instructions\n\nYou are a helpful "
      "assistant\n\n<\\|im_start\\|>user\n");
  EXPECT_TRUE(std::regex_search(*out, header)) << *out;
  const std::string tail =
      "<|im_start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n"
      "<|im_start|>assistant\n";
  ASSERT_GE(out->size(), tail.size());
  EXPECT_EQ(out->substr(out->size() - tail.size()), tail);
}

// ---- Jinja2 semantics -----------------------------------------------------------------------

struct SemanticCase {
  const char* name;
  const char* source;
  const char* expected;
};

// Each rendered with the reference conversation, add_generation_prompt true, no BOS/EOS.
const SemanticCase
    kSemanticCases
        [] =
            {
                {"trim_blocks", R"J({% if true %}
A
{% endif %}
B)J",
                 R"J(A
B)J"},
                {"lstrip_blocks", R"J(x
    {% if true %}
    y
    {% endif %}
z)J",
                 R"J(x
    y
z)J"},
                {"dash_strips", R"J(a   {%- if true -%}   b   {%- endif -%}   c)J", R"J(abc)J"},
                {"plus_keeps", R"J(  {%+ if true %}k{% endif %}|{% if true +%}
n{% endif %})J",
                 R"J(  k|
n)J"},
                {"var_dash", R"J([ {{- "x" -}} ])J", R"J([x])J"},
                {"trailing_newline_dropped", R"J(line
)J",
                 R"J(line)J"},
                {"crlf", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc",
                 R"J(a
b
c)J"},
                {"comment", R"J(a {# note #} b
  {# own line #}
c)J",
                 R"J(a  b
c)J"},
                {"raw", R"J({% raw %}{{ x }}{% if %}{% endraw %})J", R"J({{ x }}{% if %})J"},
                {"numbers",
                 R"J({{ 1 + 2 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 8 }} {{ 2 ** -1 }} {{ 1.5 + 1 }})J",
                 R"J(7 3.5 3 -4 1 2 256 0.5 2.5)J"},
                {"floats", R"J({{ 0.1 + 0.2 }} {{ 1e16 }} {{ 1e-5 }} {{ 100.0 }} {{ 2.5e-3 }} {{ 1 / 3 }})J",
                 R"J(0.30000000000000004 1e+16 1e-05 100.0 0.0025 0.3333333333333333)J"},
                {"strings",
                 R"J({{ "a" + "b" }} {{ "a" ~ 1 ~ none }} {{ "ab" * 2 }} {{ "a" "b" }} {{ 'it\'s' }} {{ "tab\tnl\n" }} {{ "\u00e9" }})J",
                 R"J(ab a1None abab ab it's tab	nl
 é)J"},
                {"reprs", R"J({{ [1, "a", none, true, 1.5, {"k": (1, 2)}] }} {{ (1,) }} {{ {"q": "it's"} }})J",
                 R"J([1, 'a', None, True, 1.5, {'k': (1, 2)}] (1,) {'q': "it's"})J"},
                {"compare",
                 R"J({{ 1 == 1.0 }} {{ "a" < "b" }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ [1] == (1,) }} {{ none == none }} {{ "a" != "b" }})J",
                 R"J(True True True False False True True)J"},
                {"logic",
                 R"J({{ true and 3 }} {{ 0 or "x" }} {{ not none }} {{ none or false }}|{{ 1 if false }}|{{ "y" if 0 else "n" }})J",
                 R"J(3 x True False||n)J"},
                {"membership",
                 R"J({{ "a" in "cat" }} {{ "z" not in "cat" }} {{ 2 in [1, 2] }} {{ "k" in {"k": 1} }} {{ undefined_thing in [1] }})J",
                 R"J(True True True True False)J"},
                {"unary", R"J({{ -3 }} {{ +3 }} {{ -2 ** 2 }} {{ -(2 ** 2) }})J", R"J(-3 3 4 -4)J"},
                {"subscripts",
                 R"J({{ messages[0].role }} {{ messages[-1]["content"] }} {{ messages.1.role }} {{ messages[0].missing }}|{{ messages[99] is defined }})J",
                 R"J(system Another question user |False)J"},
                {"slices",
                 R"J({{ "abcdef"[1:3] }} {{ "abcdef"[::-1] }} {{ "abcdef"[::2] }} {{ "héllo"[1:3] }} {{ [1, 2, 3, 4][-2:] }} {{ [1, 2, 3, 4, 5][4:0:-2] }} {{ "abc"[5:] }})J",
                 R"J(bc fedcba ace él [3, 4] [5, 3] )J"},
                {"undefined_is_empty",
                 R"J([{{ nothing }}][{{ nothing|length }}][{% for x in nothing %}x{% endfor %}][{{ nothing is defined }}][{{ none.attr }}])J",
                 R"J([][0][][False][])J"},
                {"for_loop_vars",
                 R"J({% for m in messages %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %})J",
                 R"J(106TrueFalse6;215FalseFalse6;324FalseFalse6;433FalseFalse6;542FalseFalse6;651FalseTrue6;)J"},
                {"for_prev_next",
                 R"J({% for x in [1, 2, 3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }} {% endfor %})J",
                 R"J(<1>2 1<2>3 2<3> )J"},
                {"for_else", R"J({% for x in [] %}no{% else %}empty{% endfor %})J", R"J(empty)J"},
                {"for_filter",
                 R"J({% for i in range(6) if i is odd %}{{ i }}:{{ loop.index }}/{{ loop.length }} {% endfor %})J",
                 R"J(1:1/3 3:2/3 5:3/3 )J"},
                {"for_unpack",
                 R"J({% for k, v in {"a": 1, "b": 2}.items() %}{{ k }}={{ v }};{% endfor %}{% for a, b in [(1, 2), [3, 4]] %}{{ a + b }}{% endfor %})J",
                 R"J(a=1;b=2;37)J"},
                {"for_string_dict",
                 R"J({% for c in "héy" %}{{ c }}.{% endfor %}{% for k in {"x": 1, "y": 2} %}{{ k }}{% endfor %})J",
                 R"J(h.é.y.xy)J"},
                {"break_continue",
                 R"J({% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %})J",
                 R"J(0134)J"},
                {"loop_cycle", R"J({% for i in range(4) %}{{ loop.cycle("a", "b") }}{% endfor %})J", R"J(abab)J"},
                {"loop_scope",
                 R"J({% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = x + i %}{{ x }}{% endfor %}{{ x }})J",
                 R"J(01020)J"},
                {"if_scope", R"J({% if true %}{% set z = 3 %}{% endif %}{{ z }})J", R"J(3)J"},
                {"namespace",
                 R"J({% set ns = namespace(count=0, roles=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% set ns.roles = ns.roles + [m.role[0]] %}{% endfor %}{{ ns.count }} {{ ns.roles }})J",
                 R"J(6 ['s', 'u', 'a', 'u', 'a', 'u'])J"},
                {"namespace_empty", R"J({% set ns = namespace() %}{% set ns.index = 5 %}{{ ns.index }})J", R"J(5)J"},
                {"set_block",
                 R"J({% set x %}two={{ 1 + 1 }}{% endset %}{{ x }}|{% set y | upper %}up{% endset %}{{ y }})J",
                 R"J(two=2|UP)J"},
                {"set_tuple", R"J({% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{{ t[1] }})J", R"J(124)J"},
                {"macro",
                 R"J({% macro m(a, b=2) %}[{{ a }}-{{ b }}-{{ varargs }}-{{ kwargs }}]{% endmacro %}{{ m(1) }}{{ m(1, 3) }}{{ m(1, b=5) }}{{ m(1, 2, 3, z=4) }})J",
                 R"J([1-2-()-{}][1-3-()-{}][1-5-()-{}][1-2-(3,)-{'z': 4}])J"},
                {"macro_sees_later_globals", R"J({% macro m() %}{{ g }}{% endmacro %}{% set g = "late" %}{{ m() }})J",
                 R"J(late)J"},
                {"call_block",
                 R"J({% macro w(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) w(21) %}got {{ v }}{% endcall %})J",
                 R"J(<got 42>)J"},
                {"with_filter_blocks",
                 R"J({% with a = 1, b = 2 %}{{ a + b }}{% endwith %}|{% filter upper %}shout {{ "it" }}{% endfilter %})J",
                 R"J(3|SHOUT IT)J"},
                {"generation",
                 R"J({% for m in messages %}{% generation %}{{ m.role[0] }}{% endgeneration %}{% endfor %})J",
                 R"J(suauau)J"},
                {"filters_text",
                 R"J({{ "  x  "|trim }}|{{ "xxhixx"|trim("x") }}|{{ "hello"|replace("l", "L") }}|{{ "hello"|replace("l", "L", 1) }}|{{ "hELLo wOrld-x"|title }}|{{ "hELLo"|capitalize }}|{{ "Ab"|lower }}{{ "Ab"|upper }}|{{ "ßx"|upper }})J",
                 R"J(x|hi|heLLo|heLlo|Hello World-X|Hello|abAB|SSX)J"},
                {"filters_seq",
                 R"J({{ [3, 1, 2]|sort }}|{{ ["b", "A", "a"]|sort }}|{{ [3, 1, 2]|sort(reverse=true) }}|{{ [1, 2]|join(", ") }}|{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}|{{ [1, 2, 3]|reverse|list }}|{{ "abc"|reverse }}|{{ "abc"|list }}|{{ [1, 5, 3]|max }}{{ [1, 5, 3]|min }}{{ [1, 2, 3]|sum }}|{{ [1, 1, 2]|unique|list }})J",
                 R"J([1, 2, 3]|['A', 'a', 'b']|[3, 2, 1]|1, 2|13|[3, 2, 1]|cba|['a', 'b', 'c']|516|[1, 2])J"},
                {"filters_select",
                 R"J({{ messages|selectattr("role", "equalto", "user")|map(attribute="content")|join("/") }}|{{ messages|rejectattr("role", "eq", "user")|list|length }}|{{ [0, 1, 2, 3]|select("odd")|list }}|{{ [0, 1, "", "a"]|select|list }}|{{ [0, 1, 2]|reject("even")|list }}|{{ ["a", "b"]|map("upper")|list }}|{{ messages|map(attribute="name", default="anon")|first }})J",
                 R"J(Hello/Who are you/Another question|3|[1, 3]|[1, 'a']|[1]|['A', 'B']|anon)J"},
                {"filters_conv",
                 R"J({{ 3.7|int }}|{{ "12"|int + 1 }}|{{ "x"|int }}|{{ "x"|int(7) }}|{{ "42.9"|int }}|{{ "0x1A"|int(base=16) }}|{{ "1.5"|float }}|{{ 2|float }}|{{ 5|string ~ "!" }}|{{ none|string }}|{{ -3|abs }}|{{ 2.567|round(2) }}|{{ 2.5|round }}|{{ 2.1|round(method="ceil") }})J",
                 R"J(3|13|0|7|42|26|1.5|2.0|5!|None|3|2.57|2.0|3.0)J"},
                {"filters_default",
                 R"J({{ missing|default("dflt") }}|{{ ""|default("e", true) }}|{{ none|d("n") }}|{{ 0|default(5) }})J",
                 R"J(dflt|e|None|0)J"},
                {"filters_len",
                 R"J({{ missing|length }} {{ "héllo"|length }} {{ {"a": 1}|length }} {{ messages|count }} {{ {"b": 1, "a": 2}|dictsort }} {{ {"a": 1}|items|list }})J",
                 R"J(0 5 1 6 [('a', 2), ('b', 1)] [('a', 1)])J"},
                {"filters_indent",
                 R"J({{ "a\nb\n\nc"|indent(2) }}|{{ "a\nb"|indent(2, true) }}|{{ "a\n\nb"|indent(2, blank=true) }}|{{ "a\nb"|indent("> ") }})J",
                 R"J(a
  b

  c|  a
  b|a
  
  b|a
> b)J"},
                {"filters_misc",
                 R"J({{ "<a href='x'>&"|e }}|{{ "%s=%d"|format("a", 1) }}|{{ "x"|center(5) }}|{{ "a b  c"|wordcount }}|{{ "s"|safe }})J",
                 R"J(&lt;a href=&#39;x&#39;&gt;&amp;|a=1|  x  |3|s)J"},
                {"tojson",
                 R"J({{ {"a": [1, 2.5, none, true, "q\"\n"], "b": {}}|tojson }}|{{ "é<>&'"|tojson }}|{{ [1, 2]|tojson(separators=(",", ":")) }}|{{ {"b": 1, "a": 2}|tojson(sort_keys=true) }})J",
                 R"J({"a": [1, 2.5, null, true, "q\"\n"], "b": {}}|"é<>&'"|[1,2]|{"a": 2, "b": 1})J"},
                {"tojson_indent", R"J({{ {"a": [1, {"c": []}], "d": "x"}|tojson(indent=2) }})J",
                 R"J({
  "a": [
    1,
    {
      "c": []
    }
  ],
  "d": "x"
})J"},
                {"tests",
                 R"J({{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ "a" is string }} {{ 1 is number }} {{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ true is true }} {{ 0 is false }} {{ {} is mapping }} {{ [] is iterable }} {{ [] is sequence }} {{ "abc" is lower }} {{ "ABC" is upper }} {{ 3 is gt 2 }} {{ 3 is in [1, 3] }} {{ 1 is not none }} {{ range is callable }})J",
                 R"J(False True True True True True False True True True True True True False True True True True True True True True True)J"},
                {"str_methods",
                 R"J({{ "Hello".startswith("He") }} {{ "Hello".endswith(("x", "lo")) }} {{ "  hi  ".strip() }} {{ "..hi..".lstrip(".") }} {{ "..hi..".rstrip(".") }} {{ "héllo".find("l") }} {{ "hello".rfind("l") }} {{ "hello".count("l") }} {{ ",".join(["a", "b"]) }} {{ "Hi".upper() }}{{ "Hi".lower() }} {{ "hello world".title() }} {{ "x.py".removesuffix(".py") }} {{ "42".zfill(5) }} {{ "123".isdigit() }})J", R"J(True True hi hi.. ..hi 2 3 2 a,b HIhi Hello World x 00042 True)J"},
                {"str_split",
                 R"J({{ " a b  c ".split() }} {{ "a,b,,c".split(",") }} {{ "a,b,c".split(",", 1) }} {{ "a b c".rsplit(None, 1) }} {{ "a,b,c".rsplit(",", 1) }} {{ "a\nb\r\nc".splitlines() }} {{ "a=b=c".partition("=") }})J",
                 R"J(['a', 'b', 'c'] ['a', 'b', '', 'c'] ['a', 'b,c'] ['a b', 'c'] ['a,b', 'c'] ['a', 'b', 'c'] ('a', '=', 'b=c'))J"},
                {"str_format",
                 R"J({{ "%s-%d-%05.1f-%x-%r" % ("a", 3, 3.14159, 255, "q") }} {{ "{}-{x}-{0}".format(1, x=2) if false else "{}-{x}".format(1, x=2) }} {{ "{:>6}|{:<4}|{:^7}|{:08.3f}|{:,}".format("ab", "c", "mid", 3.14159, 1234567) }})J",
                 R"J(a-3-003.1-ff-'q' 1-2     ab|c   |  mid  |0003.142|1,234,567)J"},
                {"dict_methods",
                 R"J({{ {"a": 1}.get("a") }} {{ {"a": 1}.get("b") }} {{ {"a": 1}.get("b", 2) }} {{ {"a": 1}.keys()|list }} {{ {"a": 1}.values()|list }} {{ {"a": 1}.items()|list }} {{ {"a": 1}["a"] }} {{ {"a": 1}.a }})J",
                 R"J(1 None 2 ['a'] [1] [('a', 1)] 1 1)J"},
                {"globals",
                 R"J({{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ dict(a=1) }} {{ namespace(a=1).a }})J",
                 R"J([0, 1, 2] [1, 4, 7] [5, 3, 1] {'a': 1} 1)J"},
                {"qwen_reasoning_split",
                 R"J({% set c = "<think>\nplan\n</think>\n\nanswer" %}{{ c.split("</think>")[-1].lstrip("\n") }}|{{ c.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n") }})J",
                 R"J(answer|plan)J"},
};

TEST(ChatTemplateSemantics, MatchesJinja2) {
  size_t pass = 0;
  for (const SemanticCase& c : kSemanticCases) {
    SCOPED_TRACE(c.name);
    const auto out = render_source(c.source);
    ASSERT_TRUE(out.is_ok()) << out.status().to_string();
    EXPECT_EQ(*out, c.expected);
    if (*out == c.expected) ++pass;
  }
  std::printf("[chat templates] semantics %zu/%zu\n", pass, std::size(kSemanticCases));
}

TEST(ChatTemplateSemantics, MessageExtraAndTopLevelExtra) {
  ChatMessage m{"user", "hi", {}};
  m.extra["name"] = "ann";
  m.extra["meta"] = boost::json::parse(R"({"n": [1, 2.5, null, true]})");
  ChatTemplateInputs in = inputs_with({m});
  in.bos_token = "<s>";
  in.extra["tools"] = nullptr;
  in.extra["custom"] = "value";
  const auto out = render_source(
      "{{ bos_token }}{{ messages[0].name }} {{ messages[0].meta.n }} {{ tools is none }} {{ custom }} "
      "{{ add_generation_prompt }} [{{ eos_token }}]",
      in);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, "<s>ann [1, 2.5, None, True] True value True []");

  // A key in extra replaces the message's own field (content as a list of parts).
  ChatMessage parts{"user", "ignored", {}};
  parts.extra["content"] = boost::json::parse(R"([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}])");
  const auto joined = render_source("{{ messages[0].content|map(attribute='text')|join('+') }}", inputs_with({parts}));
  ASSERT_TRUE(joined.is_ok()) << joined.status().to_string();
  EXPECT_EQ(*joined, "a+b");
}

TEST(ChatTemplateSemantics, InvalidUtf8PassesThrough) {
  const std::string bytes = "a\xff\xc3";
  const auto out =
      render_source("{{ messages[0].content }}|{{ messages[0].content|length }}", inputs_with({{"user", bytes, {}}}));
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(*out, bytes + "|3");
}

// ---- errors ----------------------------------------------------------------------------------

struct ErrorCase {
  const char* source;
  ErrorCode code;
  const char* message;  // the whole message, "line:column: what"
};

// Every construct chat/README.md lists as not supported is refused, at parse or at
// render time, with a message naming it: never rendered as something else.
TEST(ChatTemplateErrors, EveryUnsupportedConstructIsNamed) {
  struct Case {
    const char* source;
    const char* named;
  };
  const Case cases[] = {
      {"{% block body %}x{% endblock %}", "block"},
      {"{% import 'm.j2' as m %}", "import"},
      {"{% from 'm.j2' import f %}", "from"},
      {"{% do messages.append(1) %}", "do"},
      {"{% autoescape true %}x{% endautoescape %}", "autoescape"},
      {"{% trans %}x{% endtrans %}", "trans"},
      {"{% for m in messages %}{{ loop.changed(m) }}{% endfor %}", "changed"},
      {"{% macro f(*args) %}{% endmacro %}", "*"},
      {"{{ f(**kwargs) }}", "**"},
      {"{{ cycler('a', 'b') }}", "cycler"},
      {"{{ joiner(', ') }}", "joiner"},
      {"{{ lipsum() }}", "lipsum"},
      {"{{ messages | batch(2) }}", "batch"},
      {"{{ messages | slice(2) }}", "slice"},
      {"{{ messages | groupby('role') }}", "groupby"},
      {"{{ 'abc' | truncate(2) }}", "truncate"},
      {"{{ 'abc' | wordwrap(2) }}", "wordwrap"},
      {"{{ 'abc' | striptags }}", "striptags"},
      {"{{ 'abc' | urlize }}", "urlize"},
      {"{{ 'abc' | urlencode }}", "urlencode"},
      {"{{ {'a': 1} | xmlattr }}", "xmlattr"},
      {"{{ 'abc' | pprint }}", "pprint"},
      {"{{ 1000 | filesizeformat }}", "filesizeformat"},
      {"{{ messages | random }}", "random"},
      {"{{ '\\N{BULLET}' }}", "\\N"},
  };
  ChatTemplateInputs inputs;
  inputs.messages = {{"user", "hi", {}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.source);
    auto tmpl = ChatTemplate::parse(c.source);
    Status st = tmpl.status();
    if (tmpl.is_ok()) st = tmpl->render(inputs).status();
    ASSERT_FALSE(st.is_ok()) << "rendered: " << *tmpl->render(inputs);
    EXPECT_TRUE(st.code() == ErrorCode::kUnsupported || st.code() == ErrorCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(c.named), std::string::npos) << st.message();
  }
}

TEST(ChatTemplateErrors, ParseErrorsNameTheLineAndColumn) {
  const ErrorCase cases[] = {
      {"{% if x %}a", ErrorCode::kInvalidArgument,
       "1:12: unexpected end of template: 'if' opened at 1:1 is not closed"},
      {"a\n{% for m in messages %}\n{{ m }}", ErrorCode::kInvalidArgument,
       "3:8: unexpected end of template: 'for' opened at 2:1 is not closed"},
      {"{{ x ", ErrorCode::kInvalidArgument, "1:1: unexpected end of template, missing '}}'"},
      {"ok\n  {% if x", ErrorCode::kInvalidArgument, "2:3: unexpected end of template, missing '%}'"},
      {"{# never closed", ErrorCode::kInvalidArgument, "1:1: missing end of comment tag"},
      {"{% raw %}x", ErrorCode::kInvalidArgument, "1:1: missing end of raw directive"},
      {"{{ 'abc }}", ErrorCode::kInvalidArgument, "1:4: unterminated string literal"},
      {"{{ (1 }}", ErrorCode::kInvalidArgument, "1:7: unexpected '}', expected ')'"},
      {"{{ }}", ErrorCode::kInvalidArgument, "1:4: expected an expression, got '}}'"},
      {"{{ 1 + }}", ErrorCode::kInvalidArgument, "1:8: expected an expression, got '}}'"},
      {"{% endif %}", ErrorCode::kInvalidArgument, "1:4: unknown or unexpected tag 'endif'"},
      {"{% for x in y %}{% endif %}", ErrorCode::kInvalidArgument,
       "1:20: unexpected tag 'endif' inside 'for' opened at 1:1"},
      {"{% frobnicate %}", ErrorCode::kInvalidArgument, "1:4: unknown or unexpected tag 'frobnicate'"},
      {"{% break %}", ErrorCode::kInvalidArgument, "1:4: 'break' outside of a loop"},
      {"{{ a $ b }}", ErrorCode::kInvalidArgument, "1:6: unexpected character '$'"},
      {"{{ x | frobnicate }}", ErrorCode::kUnsupported, "1:8: no filter named 'frobnicate'"},
      {"{{ x is frobnicated }}", ErrorCode::kUnsupported, "1:9: no test named 'frobnicated'"},
      {"{% include 'other.j2' %}", ErrorCode::kUnsupported, "1:4: the 'include' tag is not supported"},
      {"{% extends 'base.j2' %}", ErrorCode::kUnsupported, "1:4: the 'extends' tag is not supported"},
      {"{% for x in y recursive %}{% endfor %}", ErrorCode::kUnsupported, "1:15: recursive loops are not supported"},
      {"{% set true = 1 %}", ErrorCode::kInvalidArgument, "1:8: cannot assign to 'true'"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.source);
    const auto tmpl = ChatTemplate::parse(c.source);
    ASSERT_FALSE(tmpl.is_ok());
    EXPECT_EQ(tmpl.status().code(), c.code) << tmpl.status().to_string();
    EXPECT_EQ(tmpl.status().message(), c.message);
  }
}

TEST(ChatTemplateErrors, RenderErrors) {
  const ErrorCase cases[] = {
      {"{{ foo.bar }}", ErrorCode::kInvalidArgument, "1:7: 'foo' is undefined"},
      {"{{ foo.bar.baz }}", ErrorCode::kInvalidArgument, "1:7: 'foo' is undefined"},
      {"{{ foo.bar is defined }}", ErrorCode::kInvalidArgument, "1:7: 'foo' is undefined"},
      {"{{ foo[0] }}", ErrorCode::kInvalidArgument, "1:7: 'foo' is undefined"},
      {"{{ foo() }}", ErrorCode::kInvalidArgument, "1:7: 'foo' is undefined"},
      {"{{ foo + 1 }}", ErrorCode::kInvalidArgument, "1:8: 'foo' is undefined"},
      {"\n  {{ messages[0].nope.deeper }}", ErrorCode::kInvalidArgument, "2:22: 'dict object' has no attribute 'nope'"},
      {"{{ messages[9].role }}", ErrorCode::kInvalidArgument, "1:15: list object has no element 9"},
      {"{{ 1 + 'a' }}", ErrorCode::kInvalidArgument, "1:6: unsupported operand type(s) for +: 'int' and 'str'"},
      {"{{ 'a' + 1 }}", ErrorCode::kInvalidArgument, "1:8: can only concatenate str (not \"int\") to str"},
      {"{{ 1 / 0 }}", ErrorCode::kInvalidArgument, "1:6: division by zero"},
      {"{{ 1 < 'a' }}", ErrorCode::kInvalidArgument, "1:4: '<' not supported between instances of 'int' and 'str'"},
      {"{{ 2 ** 100 }}", ErrorCode::kInvalidArgument, "1:6: integer overflow"},
      {"{{ messages.append(1) }}", ErrorCode::kInvalidArgument,
       "1:19: access to attribute 'append' of 'list' object is unsafe: templates cannot modify values"},
      {"{% set x = 1 %}{% set x.y = 2 %}", ErrorCode::kInvalidArgument,
       "1:16: cannot assign attribute on non-namespace object"},
      {"{% for a, b in [1] %}{% endfor %}", ErrorCode::kInvalidArgument, "1:1: cannot unpack non-iterable int object"},
      {"{{ none|tojson }}{{ foo|tojson }}", ErrorCode::kInvalidArgument,
       "1:25: Object of type Undefined is not JSON serializable"},
      {"{{ 'x'.split('') }}", ErrorCode::kInvalidArgument, "1:13: empty separator"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.source);
    const auto out = render_source(c.source);
    ASSERT_FALSE(out.is_ok()) << *out;
    EXPECT_EQ(out.status().code(), c.code) << out.status().to_string();
    EXPECT_EQ(out.status().message(), c.message);
  }
}

TEST(ChatTemplateErrors, RaiseExceptionGivesExactlyTheMessage) {
  const auto out = render_source(
      "{% for m in messages %}{% if m.role == 'system' %}"
      "{{ raise_exception('Bad role: ' ~ m.role ~ ' at ' ~ loop.index0) }}{% endif %}{% endfor %}");
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "Bad role: system at 0");
  // Raised inside a macro inside a filter block: still exactly the message.
  const auto nested = render_source(
      "{% macro check(x) %}{% if x %}{{ raise_exception('nested') }}{% endif %}{% endmacro %}"
      "{% filter upper %}{{ check(true) }}{% endfilter %}");
  ASSERT_FALSE(nested.is_ok());
  EXPECT_EQ(nested.status().message(), "nested");
}

// ---- hostile templates -------------------------------------------------------------------------

// A small budget keeps these fast; one test below runs with the defaults.
ChatTemplateLimits small_limits() {
  ChatTemplateLimits limits;
  limits.max_steps = 200'000;
  limits.max_output_bytes = 1 << 20;
  return limits;
}

void expect_stopped(std::string_view source, ErrorCode code, std::string_view message_part,
                    const ChatTemplateLimits& limits = small_limits()) {
  SCOPED_TRACE(std::string(source.substr(0, 120)));
  const auto start = std::chrono::steady_clock::now();
  const auto out = render_source(source, inputs_with(reference_conversation()), limits);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(out.is_ok()) << "rendered " << out->size() << " bytes";
  EXPECT_EQ(out.status().code(), code) << out.status().to_string();
  EXPECT_NE(out.status().message().find(message_part), std::string::npos) << out.status().to_string();
  // Stopped, not hung: 10 million steps take under a second in a release build and ~15x
  // that under ASan on a 2-core machine.
#if defined(HEARTH_SANITIZE_ADDRESS) || defined(HEARTH_SANITIZE_THREAD)
  EXPECT_LT(seconds, 60.0);
#else
  EXPECT_LT(seconds, 10.0);
#endif
}

TEST(ChatTemplateHostile, DeepNestingIsRefusedAtParse) {
  const std::string parens = "{{ " + std::string(10000, '(') + "1" + std::string(10000, ')') + " }}";
  const std::string lists = "{{ " + std::string(10000, '[') + std::string(10000, ']') + " }}";
  std::string nots = "{{ ";
  for (int i = 0; i < 10000; ++i) nots += "not ";
  nots += "x }}";
  std::string chain = "{{ 1";
  for (int i = 0; i < 10000; ++i) chain += " + 1";
  chain += " }}";
  std::string blocks;
  for (int i = 0; i < 5000; ++i) blocks += "{% if true %}";
  for (int i = 0; i < 5000; ++i) blocks += "{% endif %}";
  std::string filters = "{{ x";
  for (int i = 0; i < 10000; ++i) filters += "|trim";
  filters += " }}";
  const std::string* sources[] = {&parens, &lists, &nots, &chain, &blocks, &filters};
  for (const std::string* source : sources) {
    const auto tmpl = ChatTemplate::parse(*source);
    ASSERT_FALSE(tmpl.is_ok());
    EXPECT_EQ(tmpl.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(tmpl.status().message().find("nested too deeply"), std::string::npos) << tmpl.status().to_string();
  }
  // Moderate nesting is fine.
  const auto ok = render_source("{{ " + std::string(50, '(') + "1" + std::string(50, ')') + " }}");
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_EQ(*ok, "1");
}

TEST(ChatTemplateHostile, OversizedSourceIsRefused) {
  const auto tmpl = ChatTemplate::parse(std::string(kMaxChatTemplateBytes + 1, 'x'));
  ASSERT_FALSE(tmpl.is_ok());
  EXPECT_EQ(tmpl.status().code(), ErrorCode::kInvalidArgument);
}

TEST(ChatTemplateHostile, RunawayTemplatesStop) {
  expect_stopped("{% for x in range(100000000) %}{% endfor %}", ErrorCode::kInvalidArgument, "range too big");
  expect_stopped("{% for i in range(100000) %}{% for j in range(100000) %}{{ loop.index }}{% endfor %}{% endfor %}",
                 ErrorCode::kResourceExhausted, "steps");
  expect_stopped("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", ErrorCode::kResourceExhausted,
                 "macro calls nested more than 64 deep");
  expect_stopped("{% macro a(n) %}{{ b(n) }}{% endmacro %}{% macro b(n) %}{{ a(n) }}{% endmacro %}{{ a(1) }}",
                 ErrorCode::kResourceExhausted, "macro calls nested");
  expect_stopped("{{ 'a' * 10000000000 }}", ErrorCode::kResourceExhausted, "larger than");
  expect_stopped("{{ [1, 2] * 10000000000 }}", ErrorCode::kResourceExhausted, "larger than");
  expect_stopped("{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 ErrorCode::kResourceExhausted, "larger than");
  expect_stopped("{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}", ErrorCode::kResourceExhausted,
                 "output grew past");
  expect_stopped("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}{% endfor %}",
                 ErrorCode::kResourceExhausted, "");
  expect_stopped("{{ 'ab'|replace('', 'x' * 100000) }}{{ ('x' * 2000)|replace('', 'y' * 1000) }}",
                 ErrorCode::kResourceExhausted, "larger than");
}

TEST(ChatTemplateHostile, DefaultLimitsStopNestedLoops) {
  expect_stopped("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 ErrorCode::kResourceExhausted, "more than 10000000 steps", ChatTemplateLimits{});
}

TEST(ChatTemplateHostile, CyclesAndDeepValues) {
  // A namespace holding itself cannot be printed, and is freed after the render.
  expect_stopped("{% set ns = namespace() %}{% set ns.self = ns %}{{ ns }}", ErrorCode::kInvalidArgument,
                 "nested more than");
  expect_stopped("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}",
                 ErrorCode::kInvalidArgument, "nested more than 128 levels");
  // Input nested deeper than values may be.
  boost::json::value deep = boost::json::array();
  for (int i = 0; i < 300; ++i) {
    boost::json::array outer;
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  ChatTemplateInputs in = inputs_with(reference_conversation());
  in.extra["deep"] = deep;
  const auto out = render_source("{{ 1 }}", in);
  ASSERT_FALSE(out.is_ok());
  EXPECT_EQ(out.status().code(), ErrorCode::kInvalidArgument);
}

TEST(ChatTemplateHostile, SmallStepBudget) {
  ChatTemplateLimits limits;
  limits.max_steps = 1000;
  expect_stopped("{% for i in range(10000) %}{{ i }}{% endfor %}", ErrorCode::kResourceExhausted,
                 "more than 1000 steps", limits);
  limits.max_steps = 1'000'000;
  limits.max_output_bytes = 1000;
  expect_stopped("{% for i in range(100) %}{{ 'abcdefghij' ~ i }}{% endfor %}", ErrorCode::kResourceExhausted,
                 "output grew past 1000 bytes", limits);
}

// ---- threads ----------------------------------------------------------------------------------

TEST(ChatTemplateConcurrency, OneTemplateManyThreads) {
  auto tmpl = ChatTemplate::parse(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + m.content|length %}"
      "<{{ m.role|upper }}:{{ m.content|trim }}>{% endfor %}{{ ns.n }}{{ strftime_now('') }}");
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  const ChatTemplateInputs in = inputs_with(reference_conversation());
  const auto expected = tmpl->render(in);
  ASSERT_TRUE(expected.is_ok()) << expected.status().to_string();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto out = tmpl->render(in);
        if (!out.is_ok() || *out != *expected) ++mismatches[static_cast<size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

}  // namespace
}  // namespace hearth
