// The OpenAI contract beyond plain text, over real processes on stories260K: structured
// output (response_format, guided_*), tool calls (forced and free, streamed and not, a
// whole round trip), logit_bias, min_tokens, stop_token_ids, best_of, suffix, chat
// templates, one chunk per token, usage in every chunk, system_fingerprint and
// x-request-id; and the bad inputs of each, answered 400 with the server unharmed.
#include <gtest/gtest.h>

#include <future>
#include <random>
#include <set>
#include <string>
#include <thread>

#include <boost/json.hpp>

#include "tests/integration/instance.h"
#include "tests/json_schema_check.h"

namespace hearth::testing {
namespace {

namespace json = boost::json;

// Small, so that the chat template's description of them fits stories260K's 512 tokens.
const json::object kWeatherTool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
    "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}})").as_object();
const json::object kTimeTool = json::parse(R"({"type": "function", "function": {"name": "get_time"}})").as_object();

// One instance: an engine with small grammar slots (16 KiB) and a frontend on the built-in
// chatml template (which takes tools in the Hermes format).
class StructuredTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto model = shared_path("models/stories260K/stories260K.gguf");
    if (!std::filesystem::exists(model)) {
      skip_ = "shared test file " + model.string() + " is absent (set HEARTH_SHARED to the folder holding models/)";
      return;
    }
    instance_ = new Instance("structured");
    if (std::string e = instance_->load(model); !e.empty()) {
      failure_ = e;
      return;
    }
    engine_ = instance_
                  ->engine({"--slots", "32", "--ctx", "512", "--kv-blocks", "1024", "--max-grammar-bytes", "16384"}, {},
                           &failure_)
                  .release();
    if (engine_ == nullptr) return;
    frontend_ = instance_->frontend(port_, {"--chat-template", "chatml"}, {}, &failure_).release();
  }
  static void TearDownTestSuite() {
    delete frontend_;
    delete engine_;
    delete instance_;
  }
  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_EQ(failure_, "");
  }

  static json::object chat_body(const std::string& content, const json::object& more = {}) {
    json::object b{{"messages", json::array{json::object{{"role", "user"}, {"content", content}}}}};
    for (const auto& kv : more) b[kv.key()] = kv.value();
    return b;
  }
  static HttpResponse post(const std::string& target, const json::object& body, uint16_t port = 0) {
    return http_request(port ? port : port_, "POST", target, json::serialize(body));
  }
  static json::object first_choice(const HttpResponse& r) {
    return json::parse(r.body).at("choices").at(0).as_object();
  }
  // A streamed chat: its content, its tool calls (merged by index, as SDKs do), its finish
  // reason and its events.
  struct Streamed {
    std::string content;
    json::array calls;
    std::string finish;
    std::vector<json::value> chunks;
  };
  static Streamed stream_of(const HttpResponse& r) {
    Streamed s;
    for (const std::string& e : sse_events(r.body)) {
      if (e == "[DONE]") continue;
      const json::value v = json::parse(e);
      s.chunks.push_back(v);
      const auto& choices = v.at("choices").as_array();
      if (choices.empty()) continue;
      const json::object& c = choices[0].as_object();
      if (c.at("finish_reason").is_string()) s.finish = c.at("finish_reason").as_string();
      const json::object* delta = c.if_contains("delta") ? &c.at("delta").as_object() : nullptr;
      if (delta == nullptr) {
        s.content += c.at("text").as_string();
        continue;
      }
      if (const auto* t = delta->if_contains("content"); t && t->is_string()) s.content += t->as_string();
      if (const auto* calls = delta->if_contains("tool_calls")) {
        for (const auto& call : calls->as_array()) {
          const auto index = static_cast<size_t>(call.at("index").to_number<int64_t>());
          if (s.calls.size() <= index) s.calls.resize(index + 1);
          s.calls[index] = call;
          s.calls[index].as_object().erase("index");
        }
      }
    }
    return s;
  }
  static void expect_400(const HttpResponse& r, const std::string& param, const std::string& what) {
    ASSERT_EQ(r.status, 400) << what << ": " << r.body;
    const json::value err = json::parse(r.body).at("error");
    EXPECT_EQ(err.at("param"), json::value(param)) << what << ": " << r.body;
  }

  static inline Instance* instance_ = nullptr;
  static inline ChildProcess* engine_ = nullptr;
  static inline ChildProcess* frontend_ = nullptr;
  static inline uint16_t port_ = 0;
  static inline std::string skip_, failure_;
};

// 100 random schemas from a seeded generator, half of them streamed: every output parses
// and is valid against its schema, and ends as "stop".
TEST_F(StructuredTest, HundredRandomSchemasGiveValidOutputsStreamedOrNot) {
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  SchemaGenerator gen(seed);
  std::vector<json::value> schemas;
  for (int i = 0; i < 100; ++i) schemas.push_back(gen.schema());
  std::vector<std::future<std::string>> runs;
  for (int i = 0; i < 100; ++i) {
    runs.push_back(std::async(std::launch::async, [&, i] {
      const bool stream = i % 2 == 1;
      const json::object body = chat_body(
          "Write it.", {{"response_format", json::object{{"type", "json_schema"},
                                                         {"json_schema", json::object{{"name", "s"},
                                                                                      {"strict", true},
                                                                                      {"schema", schemas[i]}}}}},
                        {"max_tokens", 200},
                        {"temperature", 1.0},
                        {"seed", i},
                        {"stream", stream}});
      const auto r = stream ? http_request_streamed(port_, "/v1/chat/completions", json::serialize(body))
                            : post("/v1/chat/completions", body);
      if (r.status != 200) return "status " + std::to_string(r.status) + ": " + r.body;
      std::string text, finish;
      if (stream) {
        const Streamed s = stream_of(r);
        text = s.content;
        finish = s.finish;
      } else {
        const json::object c = first_choice(r);
        text = c.at("message").at("content").as_string();
        finish = c.at("finish_reason").as_string();
      }
      boost::system::error_code ec;
      const json::value doc = json::parse(text, ec);
      if (ec) return "not JSON: " + text;
      if (finish != "stop") return "finish_reason " + finish + " for " + text;
      const std::string why = why_invalid(doc, schemas[i], schemas[i]);
      return why.empty() ? std::string() : why + " in " + text;
    }));
    if (runs.size() >= 8) {
      for (auto& f : runs) {
        const std::string e = f.get();
        EXPECT_EQ(e, "");
      }
      runs.clear();
    }
  }
  for (auto& f : runs) EXPECT_EQ(f.get(), "");
}

// The traps users of other servers meet: an empty schema, true, or json_object with a
// small max_tokens still end with valid JSON and "stop", never an endless run.
TEST_F(StructuredTest, OpenSchemasEndWithValidJsonWithinMaxTokens) {
  for (const json::value& rf :
       {json::value(json::object{{"type", "json_schema"}, {"json_schema", json::object{{"name", "a"}, {"schema", json::object{}}}}}),
        json::value(json::object{{"type", "json_schema"}, {"json_schema", json::object{{"name", "a"}, {"schema", true}}}}),
        json::value(json::object{{"type", "json_object"}})}) {
    for (int max_tokens : {5, 12, 40}) {
      for (int seed = 0; seed < 3; ++seed) {
        const auto r = post("/v1/chat/completions", chat_body("Tell me.", {{"response_format", rf},
                                                                          {"max_tokens", max_tokens},
                                                                          {"temperature", 1.3},
                                                                          {"seed", seed}}));
        ASSERT_EQ(r.status, 200) << r.body;
        const json::object c = first_choice(r);
        const std::string text(c.at("message").at("content").as_string());
        EXPECT_EQ(c.at("finish_reason"), "stop") << text;
        EXPECT_LE(json::parse(r.body).at("usage").at("completion_tokens").to_number<int>(), max_tokens);
        boost::system::error_code ec;
        const json::value doc = json::parse(text, ec);
        EXPECT_FALSE(ec) << json::serialize(rf) << " max_tokens " << max_tokens << ": " << text;
        if (rf.at("type") == "json_object") {
          EXPECT_TRUE(doc.is_object()) << text;
        }
      }
    }
  }
}

TEST_F(StructuredTest, GuidedRegexChoiceAndGrammarShapeCompletions) {
  auto text_of = [](const HttpResponse& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    return std::string(json::parse(r.body).at("choices").at(0).at("text").as_string());
  };
  const std::regex phone(R"(\d{3}-\d{4})");
  for (int seed = 0; seed < 5; ++seed) {
    const std::string t = text_of(post("/v1/completions", {{"prompt", "Call me at"}, {"guided_regex", "\\d{3}-\\d{4}"},
                                                           {"max_tokens", 20}, {"temperature", 1.0}, {"seed", seed}}));
    EXPECT_TRUE(std::regex_match(t, phone)) << t;
    const std::string c = text_of(post("/v1/completions", {{"prompt", "Is it a cat?"}, {"guided_choice", {"yes", "no", "maybe"}},
                                                           {"temperature", 1.0}, {"seed", seed}}));
    EXPECT_TRUE(c == "yes" || c == "no" || c == "maybe") << c;
    const std::string g = text_of(post("/v1/completions", {{"prompt", "Once"}, {"guided_grammar", "root ::= (\"la\" | \"lo\"){2,4} \"!\""},
                                                           {"temperature", 1.0}, {"seed", seed}}));
    EXPECT_TRUE(std::regex_match(g, std::regex("(la|lo){2,4}!"))) << g;
  }
}

TEST_F(StructuredTest, BadConstraintsAre400sNamingTheField) {
  auto rf = [](json::value schema) {
    return json::object{{"type", "json_schema"}, {"json_schema", json::object{{"name", "x"}, {"schema", schema}}}};
  };
  expect_400(post("/v1/chat/completions", chat_body("x", {{"response_format", rf(json::parse(R"({"type": "strung"})"))}})),
             "response_format.json_schema.schema", "invalid type");
  {
    const auto r = post("/v1/chat/completions",
                        chat_body("x", {{"response_format", rf(json::parse(R"({"type": "string", "format": "hostname"})"))}}));
    expect_400(r, "response_format.json_schema.schema", "unsupported keyword");
    EXPECT_EQ(json::parse(r.body).at("error").at("code"), "unsupported_value");
  }
  // A schema whose grammar is larger than the engine's slots take (16 KiB here).
  json::object props;
  for (int i = 0; i < 300; ++i) props[fmt::format("field_number_{}", i)] = json::object{{"type", "string"}};
  expect_400(post("/v1/chat/completions",
                  chat_body("x", {{"response_format", rf(json::object{{"type", "object"}, {"properties", props}})}})),
             "response_format", "too large");
  expect_400(post("/v1/completions", {{"prompt", "x"}, {"guided_regex", "(a"}}), "guided_regex", "bad regex");
  expect_400(post("/v1/completions", {{"prompt", "x"}, {"guided_grammar", "root ::= nothing"}}), "guided_grammar",
             "undefined rule");
  expect_400(post("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"99999", 5}}}}), "logit_bias", "id");
  expect_400(post("/v1/completions", {{"prompt", "x"}, {"logit_bias", {{"5", "up"}}}}), "logit_bias[\"5\"]", "type");
  expect_400(post("/v1/completions", {{"prompt", "x"}, {"stop_token_ids", {7, 100000}}}), "stop_token_ids", "id");
  // The server is unharmed.
  const auto ok = post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 3}});
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// tool_choice required: the model calls a tool in the template's format, the call parses
// into message.tool_calls with arguments valid against the tool's parameters, streamed or
// not alike; then the tool's answer goes back and the model answers in text.
TEST_F(StructuredTest, ForcedToolCallsParseStreamedOrNotAndRoundTrip) {
  const json::value params = kWeatherTool.at("function").at("parameters");
  for (int seed = 0; seed < 4; ++seed) {
    json::object body = chat_body("What is the weather in Paris?", {{"tools", {kWeatherTool, kTimeTool}},
                                                                   {"tool_choice", "required"},
                                                                   {"parallel_tool_calls", seed % 2 == 0},
                                                                   {"temperature", 1.0},
                                                                   {"seed", seed},
                                                                   {"max_tokens", 120}});
    const auto r = post("/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.body;
    const json::object c = first_choice(r);
    EXPECT_EQ(c.at("finish_reason"), "tool_calls") << r.body;
    const json::array& calls = c.at("message").at("tool_calls").as_array();
    ASSERT_GE(calls.size(), 1u) << r.body;
    if (seed % 2 == 1) {
      EXPECT_EQ(calls.size(), 1u) << "parallel_tool_calls false: " << r.body;
    }
    for (const auto& call : calls) {
      EXPECT_EQ(call.at("type"), "function");
      EXPECT_TRUE(call.at("id").as_string().starts_with("call_"));
      const std::string name(call.at("function").at("name").as_string());
      const json::value args = json::parse(call.at("function").at("arguments").as_string());
      if (name == "get_weather") {
        EXPECT_EQ(why_invalid(args, params, params), "") << args;
      } else {
        EXPECT_EQ(name, "get_time");
        EXPECT_EQ(args, json::object{});
      }
    }
    body["stream"] = true;
    const Streamed s = stream_of(http_request_streamed(port_, "/v1/chat/completions", json::serialize(body)));
    EXPECT_EQ(s.finish, "tool_calls");
    ASSERT_EQ(s.calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(s.calls[i].at("function"), calls[i].at("function")) << "streamed call " << i;
    }
    EXPECT_EQ(s.content, "");
  }
  // A named function is the one called.
  const auto named = post("/v1/chat/completions",
                          chat_body("Now?", {{"tools", {kWeatherTool, kTimeTool}},
                                             {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_time"}}}}}}));
  ASSERT_EQ(named.status, 200) << named.body;
  const json::object named_choice = first_choice(named);
  const json::array& one = named_choice.at("message").at("tool_calls").as_array();
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].at("function").at("name"), "get_time");
  // The round trip: the call and the tool's result go back; the model answers.
  json::array messages{json::object{{"role", "user"}, {"content", "Now?"}},
                       json::object{{"role", "assistant"}, {"content", nullptr},
                                    {"tool_calls", json::array{one[0]}}},
                       json::object{{"role", "tool"}, {"tool_call_id", one[0].at("id")}, {"content", "It is 9 o'clock."}}};
  const auto answer = post("/v1/chat/completions", {{"messages", messages},
                                                    {"tools", {kTimeTool}},
                                                    {"max_tokens", 8},
                                                    {"temperature", 0}});
  ASSERT_EQ(answer.status, 200) << answer.body;
  const json::object a = first_choice(answer);
  EXPECT_TRUE(a.at("message").at("content").is_string()) << answer.body;
  EXPECT_NE(a.at("finish_reason"), "tool_calls");
}

TEST_F(StructuredTest, BadToolRequestsAre400s) {
  expect_400(post("/v1/chat/completions",
                  chat_body("x", {{"tools", {kWeatherTool}},
                                  {"tool_choice", {{"type", "function"}, {"function", {{"name", "launch"}}}}}})),
             "tool_choice", "unknown tool");
  json::object bad_params = kWeatherTool;
  bad_params["function"].as_object()["parameters"] = json::parse(R"({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}})");
  expect_400(post("/v1/chat/completions", chat_body("x", {{"tools", {bad_params}}, {"tool_choice", "required"}})),
             "tools[get_weather].function.parameters", "unsupported keyword");
  // A template without a tool format (plain text here) refuses tools rather than ignoring them.
  uint16_t plain_port = 0;
  std::string failure;
  auto plain = instance_->frontend(plain_port, {"--chat-template", "zephyr"}, {}, &failure);
  ASSERT_NE(plain, nullptr) << failure;
  const auto r = post("/v1/chat/completions", chat_body("x", {{"tools", {kWeatherTool}}}), plain_port);
  expect_400(r, "tools", "no tool format");
  EXPECT_EQ(post("/v1/chat/completions", chat_body("x", {{"tools", {kWeatherTool}}, {"tool_choice", "none"}, {"max_tokens", 2}}),
                 plain_port)
                .status,
            200);
}

// A model without a chat template answers chat with a 400 that says what to do.
TEST_F(StructuredTest, ChatWithoutATemplateSaysToPassOne) {
  uint16_t bare_port = 0;
  std::string failure;
  auto bare = instance_->frontend(bare_port, {"--chat-template", ""}, {}, &failure);
  ASSERT_NE(bare, nullptr) << failure;
  const auto r = post("/v1/chat/completions", chat_body("Hi"), bare_port);
  expect_400(r, "messages", "no template");
  EXPECT_NE(r.body.find("--chat-template"), std::string::npos) << r.body;
  EXPECT_EQ(post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}, bare_port).status, 200);
  // A missing template file stops the frontend at start, naming it.
  uint16_t none = 0;
  EXPECT_EQ(instance_->frontend(none, {"--chat-template", "/no/such.jinja"}, {}, &failure), nullptr);
  EXPECT_NE(failure.find("/no/such.jinja"), std::string::npos) << failure;
}

TEST_F(StructuredTest, LogitBiasMinTokensAndStopTokenIdsChangeTheOutput) {
  auto ids_of = [](const HttpResponse& r) {
    EXPECT_EQ(r.status, 200) << r.body;
    std::vector<std::string> tokens;
    const json::value v = json::parse(r.body);
    for (const auto& t : v.at("choices").at(0).at("logprobs").at("tokens").as_array()) {
      tokens.emplace_back(t.as_string());
    }
    return tokens;
  };
  const json::object base{{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 0}};
  const auto plain = ids_of(post("/v1/completions", base));
  ASSERT_EQ(plain.size(), 8u);
  // A +100 bias on one token makes it every token.
  json::object forced = base;
  forced["logit_bias"] = {{"300", 100}};
  const auto f = ids_of(post("/v1/completions", forced));
  ASSERT_EQ(f.size(), 8u);
  for (const auto& t : f) EXPECT_EQ(t, f[0]);  // token 300 each time
  EXPECT_NE(f, plain);
  // stop_token_ids: the first greedy token as a stop id ends the choice there...
  const auto tok = json::parse(http_request(port_, "POST", "/tokenize", json::serialize(json::object{{"prompt", plain[1]}, {"add_special_tokens", false}})).body);
  const int64_t second = tok.at("tokens").at(0).to_number<int64_t>();
  json::object stopping = base;
  stopping["stop_token_ids"] = {second};
  const auto st = post("/v1/completions", stopping);
  ASSERT_EQ(st.status, 200) << st.body;
  EXPECT_EQ(json::parse(st.body).at("choices").at(0).at("finish_reason"), "stop");
  EXPECT_EQ(json::parse(st.body).at("usage").at("completion_tokens"), 2);
  // ...unless min_tokens asks for more first.
  stopping["min_tokens"] = 5;
  const auto mt = post("/v1/completions", stopping);
  ASSERT_EQ(mt.status, 200) << mt.body;
  EXPECT_GE(json::parse(mt.body).at("usage").at("completion_tokens").to_number<int>(), 5);
}

// best_of samples that many and returns the n with the highest mean log-probability.
TEST_F(StructuredTest, BestOfReturnsTheLikeliestSamples) {
  const json::object one{{"prompt", "The dog"}, {"max_tokens", 6}, {"temperature", 1.2}, {"logprobs", 0}};
  std::vector<std::pair<double, std::string>> samples;
  for (int i = 0; i < 4; ++i) {
    json::object b = one;
    b["seed"] = 40 + i;
    const auto r = post("/v1/completions", b);
    ASSERT_EQ(r.status, 200) << r.body;
    const json::object c = first_choice(r);
    double sum = 0;
    const auto& lps = c.at("logprobs").at("token_logprobs").as_array();
    for (const auto& lp : lps) sum += lp.to_number<double>();
    samples.emplace_back(sum / static_cast<double>(lps.size()), std::string(c.at("text").as_string()));
  }
  json::object best = one;
  best["seed"] = 40;
  best["best_of"] = 4;
  best["n"] = 2;
  const auto r = post("/v1/completions", best);
  ASSERT_EQ(r.status, 200) << r.body;
  const json::value parsed = json::parse(r.body);
  const json::array& choices = parsed.at("choices").as_array();
  ASSERT_EQ(choices.size(), 2u);
  std::sort(samples.begin(), samples.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  EXPECT_EQ(choices[0].at("text").as_string(), samples[0].second);
  EXPECT_EQ(choices[1].at("text").as_string(), samples[1].second);
  EXPECT_EQ(json::parse(r.body).at("usage").at("completion_tokens"), 24);  // every sample counts
}

TEST_F(StructuredTest, SuffixNeedsFillInTheMiddleTokens) {
  const auto r = post("/v1/completions", {{"prompt", "def f():"}, {"suffix", "return x"}});
  expect_400(r, "suffix", "no FIM tokens");
  EXPECT_EQ(json::parse(r.body).at("error").at("code"), "unsupported_value");
}

// One chunk per token, usage in every chunk when asked, a system_fingerprint in every
// body and chunk, and x-request-id on every response (the client's when it sent one).
TEST_F(StructuredTest, StreamsSendAChunkPerTokenWithFingerprintAndRequestId) {
  const json::object body{{"prompt", "Once upon a time"}, {"max_tokens", 20}, {"temperature", 0}, {"stream", true},
                          {"stream_options", {{"include_usage", true}, {"continuous_usage_stats", true}}}};
  const auto r = http_request_streamed(port_, "/v1/completions", json::serialize(body));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(r.headers.contains("x-request-id"));
  const Streamed s = stream_of(r);
  int text_chunks = 0, last_usage = 0;
  std::string fingerprint;
  for (const json::value& c : s.chunks) {
    fingerprint = c.at("system_fingerprint").as_string();
    EXPECT_TRUE(c.at("usage").is_object()) << c;
    const int used = c.at("usage").at("completion_tokens").to_number<int>();
    EXPECT_GE(used, last_usage);
    last_usage = used;
    if (!c.at("choices").as_array().empty() && !c.at("choices").at(0).at("text").as_string().empty()) ++text_chunks;
  }
  EXPECT_EQ(text_chunks, 20) << "a chunk per token of ASCII text";
  EXPECT_EQ(last_usage, 20);
  EXPECT_TRUE(fingerprint.starts_with("fp_")) << fingerprint;
  const auto whole = post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}});
  EXPECT_EQ(json::parse(whole.body).at("system_fingerprint").as_string(), fingerprint);
  EXPECT_TRUE(whole.headers.contains("x-request-id"));
  const auto err = http_request(port_, "POST", "/v1/completions", "{}");
  EXPECT_EQ(err.status, 400);
  EXPECT_TRUE(err.headers.contains("x-request-id"));
  // The client's id is echoed.
  auto mine = http_request(port_, "GET", "/health", "", "application/json", {{"x-request-id", "trace-42"}});
  EXPECT_EQ(mine.headers["x-request-id"], "trace-42");
  auto odd = http_request(port_, "GET", "/health", "", "application/json", {{"x-request-id", std::string(300, 'a')}});
  EXPECT_NE(odd.headers["x-request-id"], std::string(300, 'a'));  // too long: a new one
  EXPECT_FALSE(odd.headers["x-request-id"].empty());
}

}  // namespace
}  // namespace hearth::testing
