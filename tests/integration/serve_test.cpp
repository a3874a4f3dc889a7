// Serving with real processes and real HTTP: hearth-loader, hearth-engine and
// hearth-frontend on the stories260K model. Built twice: serve_test runs one engine,
// serve_tp_test (HEARTH_SERVE_TP=2) a tensor-parallel group of two engine ranks, each
// pinned to its share of the CPUs, behind the same frontend, and compares the greedy
// answers of its concurrency test with those of a one-rank instance.
#include <signal.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <future>
#include <regex>
#include <string>
#include <thread>

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tests/integration/instance.h"
#include "tests/test_util.h"

#ifndef HEARTH_SERVE_TP
#define HEARTH_SERVE_TP 1
#endif

namespace hearth::testing {
namespace {

constexpr int kTp = HEARTH_SERVE_TP;

using namespace std::chrono_literals;
namespace json = boost::json;

const std::string kGroundTruth =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high.\n"
    "Lily's mom said, \"Lily, let's go to the park.\" Lily was sad and didn't know what to do. She said, \"I want "
    "to play with your ball, but I can't find it.\"";
const std::string kPrompt = "Once upon a time";
const std::string kContinuation = kGroundTruth.substr(kPrompt.size());

// One instance: loader (published, then gone), engine and frontend running. A process
// that does not start fails every test with its log.
class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto model = shared_path("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model)) {
      skip_ = "shared test file " + model.string() + " is absent (set HEARTH_SHARED to the folder holding models/)";
      return;
    }
    instance_ = new Instance("srv");
    if (std::string e = instance_->load(model, {"--tp", std::to_string(kTp)}); !e.empty()) {
      failure_ = e;
      return;
    }
    std::vector<std::string> flags = {"--slots", "96", "--ctx", "512", "--kv-blocks", "2048"};
    if (kTp > 1) flags.insert(flags.end(), {"--tp", std::to_string(kTp), "--cpus", "auto"});
    for (int r = kTp - 1; r >= 1; --r) {  // ranks 1..tp-1 wait for rank 0's group
      std::vector<std::string> rank = flags;
      rank.insert(rank.end(), {"--rank", std::to_string(r)});
      auto shard = instance_->engine(rank, {}, &failure_);
      if (shard == nullptr) return;
      shards_.push_back(std::move(shard));
    }
    engine_ = instance_->engine(flags, {}, &failure_).release();
    if (engine_ == nullptr) return;
    frontend_ = instance_->frontend(port_, {"--threads", "2"}, {}, &failure_).release();
  }

  static void TearDownTestSuite() {
    delete frontend_;
    delete engine_;
    shards_.clear();
    delete instance_;
    frontend_ = nullptr;
    engine_ = nullptr;
    instance_ = nullptr;
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(failure_, "");
    ASSERT_NE(port_, 0);
  }

  static HttpResponse post(const std::string& target, const json::object& body) {
    return http_request(port_, "POST", target, json::serialize(body));
  }

  static std::string completion_text(const HttpResponse& r) {
    return std::string(json::parse(r.body).at("choices").at(0).at("text").as_string());
  }

  // The concatenated deltas of a streamed response, and the events.
  static std::string streamed_text(const HttpResponse& r, bool chat, std::vector<std::string>* events = nullptr) {
    std::string text;
    const auto ev = sse_events(r.body);
    for (const auto& e : ev) {
      if (e == "[DONE]") continue;
      const auto v = json::parse(e);
      const auto& choices = v.at("choices").as_array();
      if (choices.empty()) continue;
      if (chat) {
        const auto& delta = choices.at(0).at("delta").as_object();
        if (const auto* c = delta.if_contains("content"); c && c->is_string()) text += c->as_string();
      } else {
        text += choices.at(0).at("text").as_string();
      }
    }
    if (events) *events = ev;
    return text;
  }

  static inline std::string skip_, failure_;
  static inline Instance* instance_ = nullptr;
  static inline ChildProcess* engine_ = nullptr;
  static inline std::vector<std::unique_ptr<ChildProcess>> shards_;  // ranks 1..tp-1
  static inline ChildProcess* frontend_ = nullptr;
  static inline uint16_t port_ = 0;
};

TEST_F(ServeTest, GroundTruthThroughBothEndpointsStreamedAndNot) {
  const auto completions = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 127}, {"temperature", 0}});
  ASSERT_EQ(completions.status, 200) << completions.body;
  EXPECT_EQ(completion_text(completions), kContinuation);
  const auto v = json::parse(completions.body);
  EXPECT_EQ(v.at("object").as_string(), "text_completion");
  EXPECT_EQ(v.at("choices").at(0).at("finish_reason").as_string(), "length");
  EXPECT_EQ(v.at("usage").at("prompt_tokens").to_number<int>(), 5);
  EXPECT_EQ(v.at("usage").at("completion_tokens").to_number<int>(), 127);

  std::vector<std::string> events;
  const auto streamed = post("/v1/completions", {{"prompt", kPrompt},
                                                 {"max_tokens", 127},
                                                 {"temperature", 0},
                                                 {"stream", true},
                                                 {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.headers.at("content-type"), "text/event-stream");
  EXPECT_EQ(streamed_text(streamed, false, &events), kContinuation);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(json::parse(events[events.size() - 2]).at("usage").at("completion_tokens").to_number<int>(), 127);

  const json::object chat_body{{"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                               {"max_tokens", 127},
                               {"temperature", 0}};
  const auto chat = post("/v1/chat/completions", chat_body);
  ASSERT_EQ(chat.status, 200) << chat.body;
  const auto c = json::parse(chat.body);
  EXPECT_EQ(c.at("object").as_string(), "chat.completion");
  EXPECT_EQ(c.at("choices").at(0).at("message").at("role").as_string(), "assistant");
  EXPECT_EQ(c.at("choices").at(0).at("message").at("content").as_string(), kContinuation);
  json::object stream_body = chat_body;
  stream_body["stream"] = true;
  const auto chat_stream = post("/v1/chat/completions", stream_body);
  ASSERT_EQ(chat_stream.status, 200);
  EXPECT_EQ(streamed_text(chat_stream, true), kContinuation);
}

// The Anthropic Messages and OpenAI Responses routes give the ground truth as well, in
// their own shapes, streamed (typed events) and not.
TEST_F(ServeTest, GroundTruthThroughMessagesAndResponses) {
  const json::array messages{json::object{{"role", "user"}, {"content", kPrompt}}};
  const auto m = post("/v1/messages", {{"messages", messages}, {"max_tokens", 127}, {"temperature", 0}});
  ASSERT_EQ(m.status, 200) << m.body;
  const auto mv = json::parse(m.body);
  EXPECT_EQ(mv.at("type").as_string(), "message");
  EXPECT_EQ(mv.at("content").at(0).at("text").as_string(), kContinuation);
  EXPECT_EQ(mv.at("stop_reason").as_string(), "max_tokens");
  EXPECT_EQ(mv.at("usage").at("output_tokens").to_number<int>(), 127);
  const auto ms = post("/v1/messages", {{"messages", messages}, {"max_tokens", 127}, {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(ms.status, 200) << ms.body;
  EXPECT_NE(ms.body.find("event: message_start\n"), std::string::npos) << ms.body.substr(0, 200);
  std::string text;
  std::vector<std::string> types;
  for (const std::string& e : sse_events(ms.body)) {
    const auto v = json::parse(e);
    types.emplace_back(v.at("type").as_string());
    if (types.back() == "content_block_delta") text += v.at("delta").at("text").as_string();
  }
  EXPECT_EQ(text, kContinuation);
  ASSERT_GE(types.size(), 6u);
  EXPECT_EQ(types.front(), "message_start");
  EXPECT_EQ(types[types.size() - 3], "content_block_stop");
  EXPECT_EQ(types[types.size() - 2], "message_delta");
  EXPECT_EQ(types.back(), "message_stop");

  // A prefill: the answer continues the final assistant message, without repeating it.
  const std::string prefilled = ", there was a little girl";
  ASSERT_EQ(kContinuation.substr(0, prefilled.size()), prefilled);
  const json::array with_prefill{json::object{{"role", "user"}, {"content", kPrompt}},
                                 json::object{{"role", "assistant"}, {"content", prefilled}}};
  const auto p = post("/v1/messages", {{"messages", with_prefill}, {"max_tokens", 40}, {"temperature", 0}});
  ASSERT_EQ(p.status, 200) << p.body;
  const std::string continued(json::parse(p.body).at("content").at(0).at("text").as_string());
  EXPECT_EQ(prefilled + continued, kContinuation.substr(0, prefilled.size() + continued.size())) << continued;
  EXPECT_GT(continued.size(), 40u);

  const auto r = post("/v1/responses", {{"input", kPrompt}, {"max_output_tokens", 127}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto rv = json::parse(r.body);
  EXPECT_EQ(rv.at("object").as_string(), "response");
  EXPECT_EQ(rv.at("status").as_string(), "incomplete");
  EXPECT_EQ(rv.at("output").at(0).at("content").at(0).at("text").as_string(), kContinuation);
  EXPECT_EQ(rv.at("usage").at("output_tokens").to_number<int>(), 127);
  const auto rs =
      post("/v1/responses", {{"input", kPrompt}, {"max_output_tokens", 127}, {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(rs.status, 200) << rs.body;
  text.clear();
  int64_t sequence = 0;
  std::string last;
  for (const std::string& e : sse_events(rs.body)) {
    const auto v = json::parse(e);
    EXPECT_EQ(v.at("sequence_number").to_number<int64_t>(), sequence++);
    last = v.at("type").as_string();
    if (last == "response.output_text.delta") text += v.at("delta").as_string();
  }
  EXPECT_EQ(text, kContinuation);
  EXPECT_EQ(last, "response.incomplete");
}

// The battery of bad input on the Messages and Responses routes: each a 400 in the
// route's own error shape (Anthropic's {"type": "error", ...} on /v1/messages), naming
// what is wrong, and the server serves on.
TEST_F(ServeTest, MessagesAndResponsesRefuseBadInputInTheirShapes) {
  struct Case {
    std::string target, body, says;
  };
  const std::string huge_system = json::serialize(json::object{
      {"max_tokens", 4}, {"system", std::string(400000, 'x')}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  const std::vector<Case> cases = {
      {"/v1/messages", "{\"max_tokens\": ", "request body"},
      {"/v1/messages", R"({"messages": [{"role": "user", "content": "x"}]})", "max_tokens is required"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": []})", "messages must hold"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "system", "content": "x"}]})", "messages[0].role"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "image"}]}]})",
       "image is not supported"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "sparkle"}]}]})",
       "must be text, tool_use or tool_result"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"text": "x"}]}]})",
       "content[0].type is required"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]})",
       "belong to assistant messages"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y "}]})",
       "trailing whitespace"},
      {"/v1/messages", R"({"max_tokens": 4, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]})",
       "temperature must be between 0 and 1"},
      {"/v1/messages", R"({"max_tokens": "4", "messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search_20250305", "name": "s"}]})",
       "server tools"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "g"}})",
       "tool_choice names the function"},
      {"/v1/messages", R"({"max_tokens": 40, "messages": [{"role": "user", "content": "x"}], "thinking": {"type": "enabled", "budget_tokens": 10}})",
       "started without --reasoning-parser"},
      {"/v1/messages", R"({"max_tokens": 4, "messages": [{"role": "user", "content": "x"}], "frobnicate": 1})",
       "unknown field"},
      {"/v1/messages", huge_system, "context holds"},
      {"/v1/messages/count_tokens", R"({"messages": "x"})", "messages must be an array"},
      {"/v1/messages/count_tokens", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 4})",
       "unknown field"},
      {"/v1/responses", "[]", "JSON object"},
      {"/v1/responses", R"({"max_output_tokens": 4})", "input is required"},
      {"/v1/responses", R"({"input": 7})", "input must be"},
      {"/v1/responses", R"({"input": [{"type": "message", "role": "user", "content": [{"type": "input_image"}]}]})",
       "hearth serves text models"},
      {"/v1/responses", R"({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "zz"}]})",
       "encrypted_content"},
      {"/v1/responses", R"({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "not json"}, {"type": "function_call_output", "call_id": "c", "output": "x"}]})",
       "arguments must hold a JSON object"},
      {"/v1/responses", R"({"input": "x", "tools": [{"type": "web_search"}]})", "built-in tools"},
      {"/v1/responses", R"({"input": "x", "store": true})", "store true"},
      {"/v1/responses", R"({"input": "x", "previous_response_id": "resp_1"})", "previous_response_id"},
      {"/v1/responses", R"({"input": "x", "background": true})", "background"},
      {"/v1/responses", R"({"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}})",
       "text.format.name is required"},
      {"/v1/responses", R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
  };
  for (const Case& c : cases) {
    const auto r = http_request(port_, "POST", c.target, c.body);
    EXPECT_EQ(r.status, 400) << c.target << " " << c.body.substr(0, 120) << ": " << r.body;
    const auto v = json::parse(r.body);
    const bool anthropic = c.target.starts_with("/v1/messages");
    if (anthropic) {
      EXPECT_EQ(v.at("type").as_string(), "error") << r.body;
      EXPECT_EQ(v.at("error").at("type").as_string(), "invalid_request_error") << r.body;
    }
    const std::string message(v.at("error").at("message").as_string());
    EXPECT_NE(message.find(c.says), std::string::npos) << c.body.substr(0, 120) << ": " << message;
  }
  const auto count = post("/v1/messages/count_tokens", {{"messages", {{{"role", "user"}, {"content", kPrompt}}}}});
  ASSERT_EQ(count.status, 200) << count.body;
  EXPECT_GT(json::parse(count.body).at("input_tokens").to_number<int>(), 0);
  const auto ok = post("/v1/messages", {{"messages", {{{"role", "user"}, {"content", kPrompt}}}}, {"max_tokens", 3}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// --reasoning-parser: a thinking model's <think> reasoning comes back apart from its
// answer. The output is made to think by a grammar (chat) or by a template that opens
// the reasoning when asked to think (Messages' thinking, with its token budget).
TEST_F(ServeTest, ReasoningComesBackApartFromTheAnswer) {
  TempDir dir;
  const auto template_path = dir.path() / "thinks.jinja";
  {
    std::ofstream f(template_path);
    f << "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
         "{% if add_generation_prompt %}assistant: {% if enable_thinking %}<think>\n{% endif %}{% endif %}";
  }
  uint16_t port = 0;
  std::string failure;
  auto frontend = instance_->frontend(
      port, {"--reasoning-parser", "deepseek_r1", "--chat-template", template_path.string()}, {}, &failure);
  ASSERT_NE(frontend, nullptr) << failure;
  auto post_to = [&](const std::string& target, const json::object& body) {
    return http_request(port, "POST", target, json::serialize(body));
  };
  const json::array messages{json::object{{"role", "user"}, {"content", kPrompt}}};
  const std::string pattern = "<think>[a-z ]{5,12}</think>[a-z ]{5,12}";
  const json::object chat{{"messages", messages}, {"guided_regex", pattern}, {"temperature", 0}, {"max_tokens", 64}};
  const auto r = post_to("/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  const json::value rv = json::parse(r.body);
  const auto& m = rv.at("choices").at(0).at("message");
  const std::string reasoning(m.at("reasoning_content").as_string());
  const std::string content(m.at("content").as_string());
  EXPECT_TRUE(std::regex_match(reasoning, std::regex("[a-z ]{5,12}"))) << r.body;
  EXPECT_TRUE(std::regex_match(content, std::regex("[a-z ]{5,12}"))) << r.body;
  EXPECT_GT(rv.at("usage").at("completion_tokens_details").at("reasoning_tokens").to_number<int>(), 0);
  json::object streamed_body = chat;
  streamed_body["stream"] = true;
  const auto st = post_to("/v1/chat/completions", streamed_body);
  ASSERT_EQ(st.status, 200) << st.body;
  std::string streamed_reasoning, streamed_content;
  for (const std::string& e : sse_events(st.body)) {
    if (e == "[DONE]") continue;
    const json::value v = json::parse(e);
    const auto& delta = v.at("choices").at(0).at("delta").as_object();
    if (const auto* t = delta.if_contains("reasoning_content")) streamed_reasoning += t->as_string();
    if (const auto* t = delta.if_contains("content"); t && t->is_string()) streamed_content += t->as_string();
  }
  EXPECT_EQ(streamed_reasoning, reasoning);
  EXPECT_EQ(streamed_content, content);

  // Anthropic's thinking: the template opens the reasoning, which the budget then ends.
  const auto think = post_to("/v1/messages", {{"messages", messages},
                                              {"max_tokens", 40},
                                              {"temperature", 0},
                                              {"thinking", {{"type", "enabled"}, {"budget_tokens", 6}}}});
  ASSERT_EQ(think.status, 200) << think.body;
  const auto tv = json::parse(think.body);
  EXPECT_EQ(tv.at("content").at(0).at("type").as_string(), "thinking") << think.body;
  EXPECT_FALSE(tv.at("content").at(0).at("thinking").as_string().empty()) << think.body;
  EXPECT_EQ(tv.at("stop_reason").as_string(), "max_tokens") << think.body;
  EXPECT_EQ(tv.at("usage").at("output_tokens").to_number<int>(), 7) << think.body;  // the budget, and the one past it
  // Without thinking the template does not open it, and the answer is all text.
  const auto plain = post_to("/v1/messages", {{"messages", messages}, {"max_tokens", 8}, {"temperature", 0}});
  ASSERT_EQ(plain.status, 200) << plain.body;
  EXPECT_EQ(json::parse(plain.body).at("content").at(0).at("type").as_string(), "text") << plain.body;
  frontend->signal(SIGTERM);
  frontend->wait(std::chrono::seconds(10));
}

// The numpy reference's embeddings (tests/reference/hf_forward.py --embed) of stories260K
// in its Hugging Face form, the same weights the server loaded from GGUF: [inputs, dim].
std::vector<std::vector<float>> reference_embeddings(const std::vector<std::vector<int32_t>>& inputs,
                                                     const std::string& pooling) {
  const auto hf = shared_path("models/stories260K-hf");
  const auto out = std::filesystem::temp_directory_path() / fmt::format("hearth-emb-{}.f32", ::getpid());
  std::string cmd = fmt::format("/usr/bin/python3 '{}' --embed {} '{}' '{}'",
                                source_path("tests/reference/hf_forward.py").string(), pooling, hf.string(), out.string());
  for (const auto& ids : inputs) cmd += " " + fmt::format("{}", fmt::join(ids, ","));
  if (std::system(cmd.c_str()) != 0) return {};
  std::ifstream in(out, std::ios::binary);
  std::vector<std::vector<float>> rows(inputs.size(), std::vector<float>(64));
  for (auto& r : rows) in.read(reinterpret_cast<char*>(r.data()), static_cast<std::streamsize>(r.size() * sizeof(float)));
  std::filesystem::remove(out);
  if (!in) return {};
  return rows;
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

std::vector<float> floats_of(const json::value& embedding) {
  std::vector<float> v;
  for (const auto& x : embedding.as_array()) v.push_back(static_cast<float>(x.to_number<double>()));
  return v;
}

// /v1/embeddings: 64 inputs batched through the engine beside a generation that keeps its
// ground truth, each vector the numpy reference's (last-token pooling, stories260K states
// no pooling of its own) to a cosine above 0.9999, in input order; text and base64 agree
// with ids and floats; every bad input refused with 400 and the server serving after.
TEST_F(ServeTest, EmbeddingsMatchTheNumpyReferenceBatchedWithGeneration) {
  if (std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0) GTEST_SKIP() << "python3-numpy is not installed";
  std::vector<std::vector<int32_t>> inputs;
  uint64_t seed = 99;
  for (int i = 0; i < 64; ++i) {
    std::vector<int32_t> ids = {1};
    for (int k = 0; k < 3 + i % 17; ++k) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      ids.push_back(static_cast<int32_t>(3 + (seed >> 33) % 509));
    }
    inputs.push_back(std::move(ids));
  }
  const auto want = reference_embeddings(inputs, "last");
  ASSERT_EQ(want.size(), inputs.size()) << "the numpy reference failed";

  auto story = std::async(std::launch::async, [] {
    return post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 127}, {"temperature", 0}});
  });
  json::array ids_json;
  int total = 0;
  for (const auto& ids : inputs) {
    ids_json.push_back(json::value_from(ids));
    total += static_cast<int>(ids.size());
  }
  const auto r = post("/v1/embeddings", {{"model", "srv"}, {"input", ids_json}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto v = json::parse(r.body);
  EXPECT_EQ(v.at("object"), "list");
  EXPECT_EQ(v.at("usage").at("prompt_tokens").to_number<int>(), total);
  const auto& data = v.at("data").as_array();
  ASSERT_EQ(data.size(), inputs.size());
  double worst = 1.0;
  for (size_t i = 0; i < data.size(); ++i) {
    EXPECT_EQ(data[i].at("index").to_number<size_t>(), i);
    const auto got = floats_of(data[i].at("embedding"));
    ASSERT_EQ(got.size(), 64u);
    worst = std::min(worst, cosine(got, want[i]));
    EXPECT_GT(cosine(got, want[i]), 0.9999) << "input " << i;
    EXPECT_NEAR(cosine(got, got), 1.0, 1e-6);
  }
  std::printf("embeddings: 64 inputs, lowest cosine to the numpy reference %.7f\n", worst);
  const auto generated = story.get();
  ASSERT_EQ(generated.status, 200) << generated.body;
  EXPECT_EQ(completion_text(generated), kContinuation);

  // More inputs than the engine has slots (96): the first ones run while the rest wait
  // for theirs, and the answer keeps input order.
  json::array many;
  for (size_t i = 0; i < 200; ++i) many.push_back(json::value_from(inputs[i % inputs.size()]));
  const auto big = post("/v1/embeddings", {{"input", many}});
  ASSERT_EQ(big.status, 200) << big.body.substr(0, 300);
  const json::value big_json = json::parse(big.body);
  const auto& big_data = big_json.at("data").as_array();
  ASSERT_EQ(big_data.size(), 200u);
  for (size_t i = 0; i < big_data.size(); ++i) {
    EXPECT_GT(cosine(floats_of(big_data[i].at("embedding")), want[i % inputs.size()]), 0.9999) << "input " << i;
  }

  // Text is tokenized as /tokenize does; base64 is the same floats; dimensions cut and renormalise.
  const auto tokens = post("/tokenize", {{"prompt", kPrompt}});
  ASSERT_EQ(tokens.status, 200);
  const auto text_ids = json::value_to<std::vector<int32_t>>(json::parse(tokens.body).at("tokens"));
  const auto by_text = post("/v1/embeddings", {{"input", kPrompt}});
  const auto by_ids = post("/v1/embeddings", {{"input", json::value_from(text_ids)}, {"encoding_format", "base64"}});
  const auto cut = post("/v1/embeddings", {{"input", json::value_from(text_ids)}, {"dimensions", 16}});
  ASSERT_EQ(by_text.status, 200) << by_text.body;
  ASSERT_EQ(by_ids.status, 200) << by_ids.body;
  ASSERT_EQ(cut.status, 200) << cut.body;
  const auto floats = floats_of(json::parse(by_text.body).at("data").at(0).at("embedding"));
  const std::string b64(json::parse(by_ids.body).at("data").at(0).at("embedding").as_string());
  std::string bytes;
  uint32_t acc = 0;
  int bits = 0;
  for (const char ch : b64) {
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (ch == '=') break;
    acc = (acc << 6) | static_cast<uint32_t>(std::strchr(alphabet, ch) - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  ASSERT_EQ(bytes.size(), 64u * 4);
  std::vector<float> decoded(64);
  std::memcpy(decoded.data(), bytes.data(), bytes.size());
  EXPECT_EQ(decoded, floats);
  const auto short_one = floats_of(json::parse(cut.body).at("data").at(0).at("embedding"));
  ASSERT_EQ(short_one.size(), 16u);
  EXPECT_NEAR(cosine(short_one, std::vector<float>(floats.begin(), floats.begin() + 16)), 1.0, 1e-6);

  const std::pair<std::string, std::string> bad[] = {
      {R"({"input": [1, 2, 9999]})", "outside the vocabulary"},
      {R"({"input": "a", "dimensions": 65})", "dimensions"},
      {R"({"input": [[1], 5]})", "input[1]"},
      {R"({"input": "a", "model": "other"})", "not served here"},
      {R"({"input": null})", "input is required"},
      {R"({"input": ["ok", {"type": "text"}]})", "input[1]"},
      {R"({"inputs": "a"})", "unknown field"},
      {R"({"input": "a", "encoding_format": "hex"})", "encoding_format"},
  };
  for (const auto& [body, message] : bad) {
    const auto e = http_request(port_, "POST", "/v1/embeddings", body);
    EXPECT_EQ(e.status, e.body.find("not served") != std::string::npos ? 404 : 400) << body << ": " << e.body;
    EXPECT_NE(e.body.find(message), std::string::npos) << body << ": " << e.body;
  }
  std::vector<int32_t> huge(600, 5);
  const auto too_long = post("/v1/embeddings", {{"input", json::value_from(huge)}});
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  EXPECT_NE(too_long.body.find("context holds 511"), std::string::npos) << too_long.body;
  EXPECT_EQ(http_request(port_, "GET", "/health", "").status, 200);
}

TEST_F(ServeTest, StopStringsAreMatchedAcrossTokensAndNeverEmitted) {
  const auto r = post("/v1/completions",
                      {{"prompt", kPrompt}, {"max_tokens", 127}, {"temperature", 0}, {"stop", {"named Li", "xyz"}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(completion_text(r), ", there was a little girl ");
  EXPECT_EQ(json::parse(r.body).at("choices").at(0).at("finish_reason").as_string(), "stop");
  const auto s = post("/v1/completions",
                      {{"prompt", kPrompt}, {"max_tokens", 127}, {"temperature", 0}, {"stop", "named Li"}, {"stream", true}});
  EXPECT_EQ(streamed_text(s, false), ", there was a little girl ");
}

TEST_F(ServeTest, SixtyFourConcurrentClientsGetCompleteAnswers) {
  struct Job {
    json::object body;
    bool greedy;
    bool stream;
  };
  std::vector<Job> jobs;
  for (int i = 0; i < 64; ++i) {
    json::object b{{"prompt", i % 2 ? kPrompt : std::string("The little dog")}, {"max_tokens", 8 + (i * 13) % 60}};
    const bool greedy = i % 3 != 0;
    if (greedy) {
      b["temperature"] = 0;
    } else {
      b["temperature"] = 0.9;
      b["top_p"] = 0.9;
      b["seed"] = i;
    }
    const bool stream = i % 4 == 1;
    b["stream"] = stream;
    jobs.push_back({b, greedy, stream});
  }
  std::vector<std::future<HttpResponse>> futures;
  for (const Job& j : jobs) {
    futures.push_back(std::async(std::launch::async, [&j] { return post("/v1/completions", j.body); }));
  }
  std::vector<std::string> texts;
  for (size_t i = 0; i < futures.size(); ++i) {
    const HttpResponse r = futures[i].get();
    ASSERT_EQ(r.status, 200) << "client " << i << ": " << r.error << r.body;
    texts.push_back(jobs[i].stream ? streamed_text(r, false) : completion_text(r));
    EXPECT_FALSE(texts.back().empty()) << i;
  }
  // Greedy answers equal the same request alone, and with tensor parallelism, the
  // same request to one rank.
  std::unique_ptr<Instance> one;
  std::unique_ptr<ChildProcess> one_engine, one_frontend;
  uint16_t one_port = 0;
  if (kTp > 1) {
    one = std::make_unique<Instance>("one");
    ASSERT_EQ(one->load(shared_path("models/stories260K/stories260K.gguf")), "");
    std::string failure;
    one_engine = one->engine({"--slots", "8", "--ctx", "512"}, {}, &failure);
    ASSERT_NE(one_engine, nullptr) << failure;
    one_frontend = one->frontend(one_port, {}, {}, &failure);
    ASSERT_NE(one_frontend, nullptr) << failure;
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (!jobs[i].greedy) continue;
    json::object solo = jobs[i].body;
    solo["stream"] = false;
    EXPECT_EQ(completion_text(post("/v1/completions", solo)), texts[i]) << "client " << i;
    if (kTp > 1) {
      const HttpResponse r = http_request(one_port, "POST", "/v1/completions", json::serialize(solo));
      ASSERT_EQ(r.status, 200) << r.body;
      EXPECT_EQ(completion_text(r), texts[i]) << "client " << i << " at TP " << kTp << " vs TP 1";
    }
  }
}

TEST_F(ServeTest, ErrorsHaveTheirStatusAndTheServerKeepsServing) {
  struct Case {
    std::string method, target, body;
    int status;
  };
  const std::string long_prompt = [] {
    std::string s;
    for (int i = 0; i < 300; ++i) s += "the cat sat. ";
    return s;
  }();
  const std::vector<Case> cases = {
      {"POST", "/v1/completions", "{\"prompt\": ", 400},
      {"POST", "/v1/completions", "[1, 2]", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "n": 1.5})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": 7})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": -3})", 400},
      {"POST", "/v1/completions", R"({"max_tokens": 3})", 400},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400},
      {"POST", "/v1/completions", json::serialize(json::object{{"prompt", long_prompt}}), 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400},
      {"POST", "/v1/completions", R"({"prompt": "x", "model": "gpt-17"})", 404},
      {"POST", "/v1/completions", std::string(2 << 20, ' '), 413},
      {"GET", "/v2/everything", "", 404},
      {"GET", "/v1/completions", "", 405},
      {"POST", "/health", "{}", 405},
  };
  for (const Case& c : cases) {
    const auto r = http_request(port_, c.method, c.target, c.body);
    EXPECT_EQ(r.status, c.status) << c.method << " " << c.target << " " << c.body.substr(0, 80) << ": " << r.body;
    if (r.status >= 400) {
      const auto v = json::parse(r.body);
      EXPECT_TRUE(v.at("error").at("message").is_string()) << r.body;
      EXPECT_TRUE(v.at("error").at("type").is_string()) << r.body;
    }
  }
  const auto ok = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// A request is answered as asked or refused: a schema field hearth does not implement
// and a field no schema has are 400s naming them; a frontend started with
// --lenient-fields ignores the unknown one and answers.
TEST_F(ServeTest, FieldsAreHonouredOrRefusedByName) {
  struct Case {
    std::string target, body, param, code;
  };
  for (const Case& c : std::vector<Case>{
           {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "store": true})", "store",
            "unsupported_value"},
           {"/v1/chat/completions",
            R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "web_search"}]})", "tools[0].type",
            "unsupported_value"},
           {"/v1/completions", R"({"prompt": "x", "logit_bias": {"5000": 10}})", "logit_bias", ""},
           {"/v1/completions", R"({"prompt": "x", "suffix": "y"})", "suffix", "unsupported_value"},
           {"/v1/completions", R"({"prompt": "x", "frobnicate": true})", "frobnicate", ""},
       }) {
    const auto r = http_request(port_, "POST", c.target, c.body);
    ASSERT_EQ(r.status, 400) << c.body << ": " << r.body;
    const auto err = json::parse(r.body).at("error");
    EXPECT_EQ(err.at("param"), json::value(c.param)) << r.body;
    if (!c.code.empty()) {
      EXPECT_EQ(err.at("code"), json::value(c.code)) << r.body;
    }
  }
  uint16_t lenient_port = 0;
  std::string failure;
  auto lenient = instance_->frontend(lenient_port, {"--lenient-fields"}, {}, &failure);
  ASSERT_NE(lenient, nullptr) << failure;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 5, "temperature": 0, "frobnicate": true})";
  const auto r = http_request(lenient_port, "POST", "/v1/completions", body);
  EXPECT_EQ(r.status, 200) << r.body;
  const auto refused = http_request(lenient_port, "POST", "/v1/chat/completions",
                                    R"({"messages": [{"role": "user", "content": "x"}], "store": true, "frobnicate": true})");
  EXPECT_EQ(refused.status, 400) << refused.body;  // lenient only about unknown fields
  lenient->signal(SIGTERM);
  lenient->wait(std::chrono::seconds(10));
  EXPECT_NE(lenient->err().find("frobnicate"), std::string::npos) << "logged once: " << lenient->err();
}

TEST_F(ServeTest, InfoRoutes) {
  EXPECT_EQ(http_request(port_, "GET", "/health").status, 200);
  EXPECT_EQ(http_request(port_, "GET", "/ready").status, 200);
  const auto models = http_request(port_, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  const std::string id(json::parse(models.body).at("data").at(0).at("id").as_string());
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}, {"model", id}}).status, 200);
  const auto tok = post("/tokenize", {{"prompt", kPrompt}, {"add_special_tokens", true}});
  ASSERT_EQ(tok.status, 200) << tok.body;
  const json::value parsed = json::parse(tok.body);
  EXPECT_EQ(json::serialize(parsed.at("tokens")), "[1,403,407,261,378]");
  const auto detok = post("/detokenize", {{"tokens", {403, 407, 261, 378}}});
  ASSERT_EQ(detok.status, 200) << detok.body;
  EXPECT_EQ(json::parse(detok.body).at("prompt").as_string(), kPrompt);
  EXPECT_EQ(post("/detokenize", {{"tokens", {99999}}}).status, 400);
  const auto metrics = http_request(port_, "GET", "/metrics");
  EXPECT_NE(metrics.body.find("hearth_http_requests_total"), std::string::npos);
  // The completion above finished, so both latency histograms hold at least one sample.
  for (const char* name : {"hearth_time_to_first_token_seconds_count", "hearth_e2e_request_latency_seconds_count",
                           "hearth_request_queue_time_seconds_count", "hearth_time_per_output_token_seconds_count"}) {
    EXPECT_GE(metric_value(metrics.body, name).value_or(0), 1) << name << "\n" << metrics.body;
  }
}

// The chat page: / and its files, with a policy that runs only its own scripts; other
// paths 404; --no-webui turns it off.
TEST_F(ServeTest, TheChatPageIsServedAndCanBeTurnedOff) {
  const auto page = http_request(port_, "GET", "/");
  ASSERT_EQ(page.status, 200);
  EXPECT_EQ(page.headers.at("content-type"), "text/html; charset=utf-8");
  EXPECT_NE(page.headers.at("content-security-policy").find("default-src 'self'"), std::string::npos);
  EXPECT_NE(page.body.find("/webui/app.js"), std::string::npos);
  const auto script = http_request(port_, "GET", "/webui/app.js");
  ASSERT_EQ(script.status, 200);
  EXPECT_EQ(script.headers.at("content-type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(http_request(port_, "GET", "/webui/style.css").status, 200);
  EXPECT_EQ(http_request(port_, "GET", "/webui/../../etc/passwd").status, 404);
  EXPECT_EQ(http_request(port_, "GET", "/webui/").status, 404);
  EXPECT_EQ(http_request(port_, "POST", "/", "{}").status, 404);
  const auto health = json::parse(http_request(port_, "GET", "/health").body);
  EXPECT_EQ(health.at("api_key_required"), json::value(false));
  uint16_t off_port = 0;
  std::string failure;
  auto off = instance_->frontend(off_port, {"--no-webui"}, {}, &failure);
  ASSERT_NE(off, nullptr) << failure;
  EXPECT_EQ(http_request(off_port, "GET", "/").status, 404);
  EXPECT_EQ(http_request(off_port, "GET", "/webui/app.js").status, 404);
  off->signal(SIGTERM);
  off->wait(std::chrono::seconds(10));
}

TEST_F(ServeTest, OneKeepAliveConnectionCarriesSeveralGenerations) {
  const std::string plain = json::serialize(json::object{{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 0}});
  const std::string streamed =
      json::serialize(json::object{{"prompt", kPrompt}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}});
  const auto rs = http_posts_keep_alive(
      port_, {{"/v1/completions", plain}, {"/v1/completions", streamed}, {"/v1/completions", plain}, {"/tokenize", R"({"prompt":"a"})"}});
  ASSERT_EQ(rs.size(), 4u) << rs.back().error;
  for (const auto& r : rs) EXPECT_EQ(r.status, 200) << r.error << r.body;
  const std::string want = kContinuation.substr(0, completion_text(rs[0]).size());
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(completion_text(rs[0]), want);
  EXPECT_EQ(streamed_text(rs[1], false), want);
  EXPECT_EQ(completion_text(rs[2]), want);
}

TEST_F(ServeTest, LogprobsEchoAndSeveralChoices) {
  const auto r = post("/v1/completions",
                      {{"prompt", kPrompt}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3}, {"echo", true}, {"n", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  const auto v = json::parse(r.body);
  const auto& choices = v.at("choices").as_array();
  ASSERT_EQ(choices.size(), 2u);
  for (const auto& c : choices) {
    const std::string text(c.at("text").as_string());
    EXPECT_EQ(text.substr(0, kPrompt.size()), kPrompt) << "echo puts the prompt first";
    const auto& lp = c.at("logprobs").as_object();
    EXPECT_EQ(lp.at("tokens").as_array().size(), 4u);
    EXPECT_EQ(lp.at("top_logprobs").at(0).as_object().size(), 3u);
    EXPECT_LE(lp.at("token_logprobs").at(0).to_number<double>(), 0.0);
  }
  EXPECT_EQ(choices[0].at("text"), choices[1].at("text")) << "greedy choices agree";
}

TEST_F(ServeTest, MaxBodyIsTheFlagsValue) {
  uint16_t port = 0;
  std::string failure;
  auto small = instance_->frontend(port, {"--max-body", "2048"}, {}, &failure);
  ASSERT_TRUE(small) << failure;
  // A valid request padded with JSON whitespace to an exact size.
  const std::string request = R"({"max_tokens": 1, "prompt": "Once"})";
  auto body_of = [&](size_t bytes) { return request + std::string(bytes - request.size(), ' '); };
  const auto over = http_request(port, "POST", "/v1/completions", body_of(2049));
  EXPECT_EQ(over.status, 413) << over.body;
  EXPECT_NE(over.body.find("2048"), std::string::npos) << over.body;
  const auto at_limit = http_request(port, "POST", "/v1/completions", body_of(2048));
  EXPECT_EQ(at_limit.status, 200) << at_limit.body;
  // The default (1 MiB) lets the same body through on the suite's frontend.
  EXPECT_EQ(http_request(port_, "POST", "/v1/completions", body_of(2049)).status, 200);
}

TEST_F(ServeTest, MetricsCountWhatHappened) {
  auto metrics = [] { return http_request(port_, "GET", "/metrics").body; };
  auto value = [](const std::string& m, const char* name) {
    const auto v = metric_value(m, name);
    EXPECT_TRUE(v.has_value()) << name << " is missing:\n" << m;
    return v.value_or(-1);
  };
  const std::string before = metrics();
  EXPECT_EQ(value(before, "hearth_engine_up"), 1);
  EXPECT_EQ(value(before, "hearth_kv_blocks_capacity"), 2048);
  const auto ok = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 7}, {"temperature", 0}});
  ASSERT_EQ(ok.status, 200);
  const auto bad = post("/v1/completions", {{"prompt", kPrompt}, {"temperature", "hot"}});
  ASSERT_EQ(bad.status, 400);
  // The engine publishes its statistics after its step, so a scrape right after the
  // response may be a step behind (seen under ASan): wait until it has caught up.
  std::string after = metrics();
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < deadline &&
       (metric_value(after, "hearth_engine_running") != 0 || metric_value(after, "hearth_kv_blocks_used") != 0);) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = metrics();
  }
  // Two generation requests (scrapes are not counted); other tests of the suite may not run
  // meanwhile (ctest runs each in its own process, one fixture instance each).
  // (A fresh server has no sample of it yet: no route answered.)
  EXPECT_EQ(value(after, "hearth_http_requests_total") - metric_value(before, "hearth_http_requests_total").value_or(0), 2);
  EXPECT_NE(after.find("hearth_http_requests_total{route=\"/v1/completions\",code=\"400\"}"), std::string::npos);
  EXPECT_EQ(value(after, "hearth_http_errors_total") - value(before, "hearth_http_errors_total"), 1);
  EXPECT_EQ(value(after, "hearth_generation_tokens_total") - value(before, "hearth_generation_tokens_total"), 7);
  EXPECT_EQ(value(after, "hearth_prompt_tokens_total") - value(before, "hearth_prompt_tokens_total"), 5);
  EXPECT_EQ(value(after, "hearth_request_success_total") - value(before, "hearth_request_success_total"), 1);
  EXPECT_NE(after.find("hearth_request_success_total{model_name=\"llama\",finished_reason=\"length\"}"),
            std::string::npos);
  EXPECT_EQ(value(after, "hearth_kv_cache_usage_perc"), 0);
  EXPECT_EQ(value(after, "hearth_build_info"), 1);
  EXPECT_GT(value(after, "process_resident_memory_bytes"), 0);
  EXPECT_GE(value(after, "hearth_engine_steps_total") - value(before, "hearth_engine_steps_total"), 7);
  EXPECT_EQ(value(after, "hearth_engine_running"), 0);
  EXPECT_EQ(value(after, "hearth_engine_waiting"), 0);
  EXPECT_EQ(value(after, "hearth_kv_blocks_used"), 0);
}

// The same long prompt twice: the second finds its full blocks in the engine's prefix
// cache, says so in usage (prompt_tokens_details.cached_tokens, as OpenAI does) and in
// /metrics, and answers the same text.
TEST_F(ServeTest, ARepeatedPromptIsServedFromThePrefixCache) {
  auto metrics = [] { return http_request(port_, "GET", "/metrics").body; };
  const std::string before = metrics();
  std::string prompt;
  for (int i = 0; i < 6; ++i) prompt += "The little dog ran to the park with a red ball. ";
  const json::object body{{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}};
  const auto first = post("/v1/completions", body);
  ASSERT_EQ(first.status, 200) << first.body;
  const auto second = post("/v1/completions", body);
  ASSERT_EQ(second.status, 200) << second.body;
  const auto usage1 = json::parse(first.body).at("usage"), usage2 = json::parse(second.body).at("usage");
  const int prompt_tokens = usage2.at("prompt_tokens").to_number<int>();
  ASSERT_GT(prompt_tokens, 64);
  EXPECT_EQ(usage1.at("prompt_tokens_details").at("cached_tokens").to_number<int>(), 0);
  const int cached = usage2.at("prompt_tokens_details").at("cached_tokens").to_number<int>();
  EXPECT_EQ(cached, (prompt_tokens - 1) / 16 * 16) << "every full block before the last token's";
  EXPECT_EQ(completion_text(second), completion_text(first));
  // The engine publishes its counters after its step: a scrape may be a step behind.
  auto delta = [&](const std::string& after, const char* name) {
    return metric_value(after, name).value_or(-1) - metric_value(before, name).value_or(0);
  };
  std::string after = metrics();
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
       std::chrono::steady_clock::now() < deadline && delta(after, "hearth_prefix_cache_queries_total") < 2 * prompt_tokens;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    after = metrics();
  }
  EXPECT_EQ(delta(after, "hearth_prefix_cache_queries_total"), 2 * prompt_tokens);
  EXPECT_EQ(delta(after, "hearth_prefix_cache_hits_total"), cached);
}

TEST_F(ServeTest, AStopStringCancelsTheRestAtTheEngine) {
  const auto cancelled = [] {
    return metric_value(http_request(port_, "GET", "/metrics").body, "hearth_engine_cancelled_total").value_or(-1);
  };
  const double before = cancelled();
  const auto r = post("/v1/completions", {{"prompt", kPrompt},
                                          {"max_tokens", 400},
                                          {"ignore_eos", true},
                                          {"temperature", 0},
                                          {"stop", "named Li"}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(completion_text(r), ", there was a little girl ");
  EXPECT_EQ(json::parse(r.body).at("usage").at("completion_tokens").to_number<int>() < 400, true);
  EXPECT_EQ(cancelled() - before, 1) << "the engine stopped the sequence instead of running it to max_tokens";
}

TEST_F(ServeTest, ATokenIdPromptAndChatLogprobs) {
  // The prompt as ids ("Once upon a time" with BOS) continues like the text.
  const auto ids = post("/v1/completions", {{"prompt", {1, 403, 407, 261, 378}}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(ids.status, 200) << ids.body;
  const auto text = post("/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 12}, {"temperature", 0}});
  EXPECT_EQ(completion_text(ids), completion_text(text));
  EXPECT_EQ(completion_text(ids), kContinuation.substr(0, completion_text(ids).size()));
  // Chat: logprobs for every token, with the top alternatives asked for.
  const auto chat = post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", kPrompt}}}},
                                                  {"max_tokens", 5},
                                                  {"temperature", 0},
                                                  {"logprobs", true},
                                                  {"top_logprobs", 2}});
  ASSERT_EQ(chat.status, 200) << chat.body;
  const json::value parsed = json::parse(chat.body);
  const auto& content = parsed.at("choices").at(0).at("logprobs").at("content").as_array();
  ASSERT_EQ(content.size(), 5u) << chat.body;
  std::string joined;
  for (const auto& t : content) {
    joined += t.at("token").as_string();
    EXPECT_LE(t.at("logprob").to_number<double>(), 0.0);
    ASSERT_EQ(t.at("top_logprobs").as_array().size(), 2u);
    // Greedy: the chosen token is the most likely one.
    EXPECT_EQ(t.at("top_logprobs").at(0).at("token"), t.at("token"));
  }
  EXPECT_EQ(joined, std::string(parsed.at("choices").at(0).at("message").at("content").as_string()));
}

// An embeddings request whose input the engine cannot run (more KV than its cache holds)
// fails whole, with the engine's reason, even while its other inputs still run or wait
// for slots; the server serves the next request.
TEST(EmbeddingsFailureTest, AnInputTheEngineCannotRunFailsTheWholeRequest) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance inst("embfail");
  ASSERT_EQ(inst.load(model), "");
  std::string failure;
  auto engine = inst.engine({"--slots", "2", "--ctx", "512", "--kv-blocks", "4"}, {}, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  uint16_t port = 0;
  auto frontend = inst.frontend(port, {}, {}, &failure);
  ASSERT_NE(frontend, nullptr) << failure;
  json::array inputs;
  inputs.push_back(json::value_from(std::vector<int32_t>(100, 5)));  // 7 blocks of 16: more than the cache
  for (int i = 0; i < 4; ++i) inputs.push_back(json::value_from(std::vector<int32_t>{1, 300 + i, 400}));
  const auto r = http_request(port, "POST", "/v1/embeddings", json::serialize(json::object{{"input", inputs}}));
  EXPECT_NE(r.status, 200) << r.body;
  EXPECT_NE(r.body.find("KV cache"), std::string::npos) << r.body;
  const auto ok = http_request(port, "POST", "/v1/embeddings", R"({"input": [[1, 300], [1, 301], [1, 302]]})");
  ASSERT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(json::parse(ok.body).at("data").as_array().size(), 3u);
}

// A thinking budget the engine keeps: a model whose vocabulary has <think> and </think> as
// tokens of their own (hearth synth's qwen3 with two pieces renamed so), under a template
// that opens the reasoning. After the budget's tokens </think> is put in and the answer
// follows, in the same choice: reasoning_content and content both, and usage says so.
TEST(ThinkingBudgetTest, TheEngineClosesTheReasoningAndTheAnswerFollows) {
  TempDir dir;
  const auto model = dir.path() / "m";
  const auto made = run_process({hearth_bin("hearth"), "synth", "--arch", "qwen3", "--vocab", "1002", "--layers", "1",
                                 "--hf", model.string()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  {
    std::ifstream in(model / "tokenizer.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json::value t = json::parse(text);
    json::object& bpe = t.at("model").as_object();
    json::object& vocab = bpe.at("vocab").as_object();
    json::array& merges = bpe.at("merges").as_array();
    json::array& added = t.at("added_tokens").as_array();
    for (const auto& [id, tag] : {std::pair{1000, "<think>"}, std::pair{1001, "</think>"}}) {
      for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        if (it->value().to_number<int>() == id) {
          vocab.erase(it);
          break;
        }
      }
      vocab[tag] = id;
      added.push_back(json::object{{"id", id}, {"content", tag}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", false}});
    }
    merges.erase(merges.end() - 2, merges.end());  // the two pieces' own merges, the last ones
    std::ofstream(model / "tokenizer.json") << json::serialize(t);
  }
  const auto tmpl = dir.path() / "opens.jinja";
  std::ofstream(tmpl) << "{%- for m in messages %}<|user|>{{ m.content }}\n{%- endfor %}<|assistant|><think>\n";
  Instance inst("think");
  ASSERT_EQ(inst.load(model), "");
  std::string failure;
  auto engine = inst.engine({"--slots", "4", "--ctx", "256"}, {}, &failure);
  ASSERT_NE(engine, nullptr) << failure;
  uint16_t port = 0;
  auto frontend = inst.frontend(port, {"--chat-template", tmpl.string(), "--reasoning-parser", "qwen3",
                                       "--reasoning-budget", "5"},
                                {}, &failure);
  ASSERT_NE(frontend, nullptr) << failure;
  const json::object body{{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                          {"max_tokens", 20},
                          {"temperature", 0},
                          {"ignore_eos", true},
                          // The random model may not write a tag itself: only the budget does.
                          {"logit_bias", {{"1000", -100}, {"1001", -100}}}};
  const auto r = http_request(port, "POST", "/v1/chat/completions", json::serialize(body));
  ASSERT_EQ(r.status, 200) << r.body;
  const auto v = json::parse(r.body);
  const auto& message = v.at("choices").at(0).at("message");
  std::printf("thinking budget 5: %s\n", json::serialize(message).c_str());
  EXPECT_FALSE(message.at("reasoning_content").as_string().empty()) << r.body;
  EXPECT_FALSE(message.at("content").as_string().empty()) << r.body;
  EXPECT_EQ(message.at("content").as_string().find("think>"), json::string::npos) << r.body;
  EXPECT_EQ(v.at("choices").at(0).at("finish_reason"), "length");
  EXPECT_EQ(v.at("usage").at("completion_tokens").to_number<int>(), 20);
  EXPECT_EQ(v.at("usage").at("completion_tokens_details").at("reasoning_tokens").to_number<int>(), 5) << r.body;
}

// Speculative decoding served: an engine with --spec ngram, and one with --spec draft
// (the loader keeping a draft model beside the target), answer what one without it
// answers (greedy, and seeded with n = 2 and logprobs), and /metrics counts their drafts.
TEST(SpeculationServeTest, AnEngineThatSpeculatesAnswersWhatOneThatDoesNotAnswers) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  struct Server {
    explicit Server(const char* name) : inst(name) {}
    Instance inst;
    std::unique_ptr<ChildProcess> engine, frontend;
    uint16_t port = 0;
  };
  auto start = [&](const char* name, std::vector<std::string> flags, std::vector<std::string> loader = {}) {
    auto s = std::make_unique<Server>(name);
    EXPECT_EQ(s->inst.load(model, loader), "");
    std::string failure;
    flags.insert(flags.end(), {"--slots", "8", "--ctx", "512"});
    s->engine = s->inst.engine(flags, {}, &failure);
    EXPECT_NE(s->engine, nullptr) << failure;
    s->frontend = s->inst.frontend(s->port, {}, {}, &failure);
    EXPECT_NE(s->frontend, nullptr) << failure;
    return s;
  };
  const auto plain = start("specoff", {});
  const auto spec = start("specon", {"--spec", "ngram", "--spec-tokens", "6"});
  // The draft model: the target's own file (every greedy draft kept).
  const auto drafted = start("specdraft", {"--spec", "draft"}, {"--draft-model", model.string()});
  ASSERT_TRUE(plain->frontend && spec->frontend && drafted->frontend);
  const std::vector<json::object> bodies = {
      {{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"temperature", 0}},
      {{"prompt", "Lily and Ben went to the park. Lily and Ben"}, {"max_tokens", 80}, {"temperature", 0.8},
       {"seed", 4}, {"n", 2}, {"logprobs", 2}},
  };
  for (const json::object& body : bodies) {
    const auto a = http_request(plain->port, "POST", "/v1/completions", json::serialize(body));
    ASSERT_EQ(a.status, 200) << a.body;
    const json::value ja = json::parse(a.body);
    for (const Server* server : {spec.get(), drafted.get()}) {
      const auto b = http_request(server->port, "POST", "/v1/completions", json::serialize(body));
      ASSERT_EQ(b.status, 200) << b.body;
      const json::value jb = json::parse(b.body);
      EXPECT_EQ(ja.at("choices"), jb.at("choices")) << server->inst.name() << ": " << json::serialize(body);
      // (Cached prompt tokens depend on whether the choices were admitted in one step.)
      for (const char* count : {"prompt_tokens", "completion_tokens"}) {
        EXPECT_EQ(ja.at("usage").at(count), jb.at("usage").at(count)) << count;
      }
    }
  }
  // /metrics once the engine is idle: it publishes its counts between steps.
  auto settled_metrics = [](uint16_t port) {
    std::string m = http_request(port, "GET", "/metrics").body;
    for (auto deadline = std::chrono::steady_clock::now() + 5s;
         metric_value(m, "hearth_engine_running").value_or(1) != 0 && std::chrono::steady_clock::now() < deadline;) {
      std::this_thread::sleep_for(10ms);
      m = http_request(port, "GET", "/metrics").body;
    }
    return m;
  };
  const std::string dm = settled_metrics(drafted->port);
  EXPECT_GT(metric_value(dm, "hearth_spec_decode_num_accepted_tokens_total").value_or(0), 100) << dm;
  const std::string text = json::parse(http_request(spec->port, "POST", "/v1/completions",
                                                    json::serialize(bodies[0])).body)
                               .at("choices").at(0).at("text").as_string().c_str();
  EXPECT_EQ(text.substr(0, 58), ", there was a little girl named Lily. She loved to play ou");
  const std::string m = settled_metrics(spec->port);
  EXPECT_GT(metric_value(m, "hearth_spec_decode_num_accepted_tokens_total").value_or(0), 0) << m;
  EXPECT_GE(metric_value(m, "hearth_spec_decode_num_draft_tokens_total").value_or(0),
            metric_value(m, "hearth_spec_decode_num_accepted_tokens_total").value_or(1));
  EXPECT_NE(m.find("hearth_spec_decode_num_accepted_tokens_per_pos_total{model_name=\"llama\",position=\"0\"}"),
            std::string::npos);
  EXPECT_EQ(metric_value(http_request(plain->port, "GET", "/metrics").body, "hearth_spec_decode_num_draft_tokens_total"),
            0);
  // --spec draft where the loader keeps no draft model, a method the engine does not
  // have, and a draft model of another tokenizer are refused by name.
  Instance bad("specbad");
  ASSERT_EQ(bad.load(model), "");
  std::string failure;
  EXPECT_EQ(bad.engine({"--spec", "draft"}, {}, &failure), nullptr);
  EXPECT_NE(failure.find("--draft-model"), std::string::npos) << failure;
  EXPECT_EQ(bad.engine({"--spec", "eagle"}, {}, &failure), nullptr);
  EXPECT_NE(failure.find("ngram, draft or none"), std::string::npos) << failure;
  TempDir dir;
  const std::string synth = (dir.path() / "synth512.gguf").string();
  const auto made = run_process({hearth_bin("hearth"), "synth", "--vocab", "512", "--gguf", synth});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  Instance other("specother");
  const std::string refused = other.load(model, {"--draft-model", synth});
  EXPECT_NE(refused.find("must share the target's tokenizer"), std::string::npos) << refused;
  EXPECT_FALSE(std::filesystem::exists(other.shm() / "hearth.specother.draft-weights"));
  // A draft segment nobody checked against the target (copied in beside another model of
  // the same vocabulary size) is refused by the engine too, token by token; a loader
  // started without --draft-model removes it.
  Instance copied("speccopied");
  ASSERT_EQ(copied.load(synth), "");
  const auto stale = copied.shm() / "hearth.speccopied.draft-weights";
  std::filesystem::copy_file(drafted->inst.shm() / "hearth.specdraft.draft-weights", stale);
  EXPECT_EQ(copied.engine({"--spec", "draft"}, {}, &failure), nullptr);
  EXPECT_NE(failure.find("must share the target's tokenizer"), std::string::npos) << failure;
  ASSERT_EQ(copied.load(synth), "");
  EXPECT_FALSE(std::filesystem::exists(stale));
}

}  // namespace
}  // namespace hearth::testing
