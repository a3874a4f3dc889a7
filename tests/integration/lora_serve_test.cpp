// Resident LoRA adapters served by real processes: hearth-loader --lora keeps them in the
// instance's adapter segment, requests select one by naming it as their model, and
// POST /v1/load_lora_adapter and /v1/unload_lora_adapter change the set at run time.
// An adapter's greedy text is the text the base with it merged (hearth lora merge) gives
// when served; an unload under load lets the adapter's streams finish and fails none of
// any adapter's; an engine killed mid-stream resumes adapter streams from the resident KV
// cache (each adopted sequence's check row recomputed with its adapter).
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/integration/instance.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;

const std::vector<std::string> kEngineFlags = {"--ctx", "512", "--slots", "32", "--threads", "1", "--kv-blocks", "1024"};

// Writes a seeded adapter of `rank` for `base` (strong enough to change stories260K's
// greedy text) and, when `merged` is not empty, the base with it merged.
void synth_adapter(const std::filesystem::path& base, const std::filesystem::path& dir, int rank, int seed,
                   const std::filesystem::path& merged = {}) {
  ChildProcess synth({hearth_bin("hearth"), "lora", "synth", "--model", base.string(), "--out", dir.string(), "--rank",
                      std::to_string(rank), "--seed", std::to_string(seed), "--strength", "2"});
  ASSERT_EQ(synth.wait(60s), 0) << synth.err();
  if (merged.empty()) return;
  ChildProcess merge({hearth_bin("hearth"), "lora", "merge", "--model", base.string(), "--lora", dir.string(), "--out",
                      merged.string()});
  ASSERT_EQ(merge.wait(60s), 0) << merge.err();
}

// Adapters a (rank 8) and b (rank 16) in `dir`, with merged_a.gguf and merged_b.gguf.
std::pair<std::filesystem::path, std::filesystem::path> two_adapters(const std::filesystem::path& base,
                                                                     const std::filesystem::path& dir) {
  synth_adapter(base, dir / "a", 8, 1, dir / "merged_a.gguf");
  synth_adapter(base, dir / "b", 16, 2, dir / "merged_b.gguf");
  return {dir / "a", dir / "b"};
}

std::string greedy(uint16_t port, const std::string& model, const std::string& prompt, int tokens = 80) {
  json::object body{{"prompt", prompt}, {"max_tokens", tokens}, {"temperature", 0}};
  if (!model.empty()) body["model"] = model;
  const auto r = http_request(port, "POST", "/v1/completions", json::serialize(body));
  EXPECT_EQ(r.status, 200) << model << ": " << r.body;
  if (r.status != 200) return "";
  const json::value v = json::parse(r.body);
  EXPECT_EQ(v.at("model").as_string(), model.empty() ? v.at("model").as_string() : json::string(model));
  return std::string(v.at("choices").at(0).at("text").as_string());
}

// The ids /v1/models lists, and each one's parent ("" for the base model's names).
std::vector<std::pair<std::string, std::string>> models(uint16_t port) {
  const auto r = http_request(port, "GET", "/v1/models");
  EXPECT_EQ(r.status, 200) << r.body;
  std::vector<std::pair<std::string, std::string>> out;
  const json::value doc = json::parse(r.body);
  for (const json::value& m : doc.at("data").as_array()) {
    const auto* parent = m.as_object().if_contains("parent");
    out.emplace_back(std::string(m.at("id").as_string()), parent ? std::string(parent->as_string()) : "");
  }
  return out;
}

HttpResponse admin(uint16_t port, const char* route, const json::object& body,
                   const std::map<std::string, std::string>& headers = {}) {
  return http_request(port, "POST", route, json::serialize(body), "application/json", headers);
}

struct Served {
  explicit Served(const char* name) : inst(name) {}
  Instance inst;
  std::unique_ptr<ChildProcess> engine, frontend;
  uint16_t port = 0;
};

std::unique_ptr<Served> serve(const char* name, const std::filesystem::path& model, const std::vector<std::string>& loader,
                              const std::vector<std::string>& frontend = {}) {
  auto s = std::make_unique<Served>(name);
  EXPECT_EQ(s->inst.load(model, loader), "");
  std::string failure;
  s->engine = s->inst.engine(kEngineFlags, {}, &failure);
  EXPECT_NE(s->engine, nullptr) << failure;
  if (!s->engine) return s;
  s->frontend = s->inst.frontend(s->port, frontend, {}, &failure);
  EXPECT_NE(s->frontend, nullptr) << failure;
  return s;
}

TEST(LoraServeTest, AnAdapterNamedAsTheModelAnswersWhatTheMergedModelAnswers) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  const auto [a, b] = two_adapters(model, dir.path());
  ASSERT_FALSE(HasFailure());
  const auto base = serve("loraserve", model, {"--lora", "a=" + a.string(), "--max-loras", "2"},
                          {"--allow-runtime-lora", "--log-level", "info"});
  const auto merged_a = serve("loramergeda", dir.path() / "merged_a.gguf", {});
  const auto merged_b = serve("loramergedb", dir.path() / "merged_b.gguf", {});
  ASSERT_TRUE(base->frontend && merged_a->frontend && merged_b->frontend);

  const auto listed = models(base->port);
  ASSERT_EQ(listed.size(), 3u);
  const std::string parent = listed[0].first;
  EXPECT_EQ(listed[2], std::pair(std::string("a"), parent));

  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to"};
  for (const char* prompt : prompts) {
    const std::string adapted = greedy(base->port, "a", prompt);
    EXPECT_EQ(adapted, greedy(merged_a->port, "", prompt)) << prompt;
    EXPECT_NE(adapted, greedy(base->port, "", prompt)) << "the adapter changes the text";
  }
  // Chat completions and streams go the same way.
  const auto chat = http_request(base->port, "POST", "/v1/chat/completions",
                                 json::serialize(json::object{{"model", "a"},
                                                              {"messages", json::array{json::object{{"role", "user"}, {"content", "Hi"}}}},
                                                              {"max_tokens", 8}}));
  EXPECT_TRUE(chat.status == 200 || chat.status == 400) << chat.body;  // 400: the model has no chat template
  EXPECT_EQ(chat.body.find("not served"), std::string::npos) << chat.body;

  // Loaded at run time: answers as its merged model does.
  auto r = admin(base->port, "/v1/load_lora_adapter", {{"lora_name", "b"}, {"lora_path", b.string()}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body).at("status").as_string(), "loaded");
  for (const char* prompt : prompts) EXPECT_EQ(greedy(base->port, "b", prompt), greedy(merged_b->port, "", prompt)) << prompt;
  const auto before = models(base->port);
  EXPECT_EQ(before.size(), 4u);

  // Refused, with nothing changed: a taken name, a full segment, the base's own name, a
  // malformed directory, unknown fields, an unknown adapter to unload.
  std::filesystem::create_directories(dir.path() / "bad");
  {
    std::ofstream(dir.path() / "bad" / "adapter_config.json") << R"({"r": 8, "lora_alpha": 16, "target_modules": )";
  }
  struct Refusal {
    const char* route;
    json::object body;
    int status;
    const char* says;
  };
  const Refusal refusals[] = {
      {"/v1/load_lora_adapter", {{"lora_name", "b"}, {"lora_path", a.string()}}, 400, "already loaded"},
      {"/v1/load_lora_adapter", {{"lora_name", "c"}, {"lora_path", a.string()}}, 400, "--max-loras"},
      {"/v1/load_lora_adapter", {{"lora_name", parent}, {"lora_path", a.string()}}, 400, "base model"},
      {"/v1/load_lora_adapter", {{"lora_name", "d"}, {"lora_path", (dir.path() / "bad").string()}}, 400, "adapter_config.json"},
      {"/v1/load_lora_adapter", {{"lora_name", "d"}, {"lora_path", (dir.path() / "none").string()}}, 404, ""},
      {"/v1/load_lora_adapter", {{"lora_name", "d"}}, 400, "lora_path"},
      {"/v1/load_lora_adapter", {{"lora_name", "e f"}, {"lora_path", a.string()}}, 400, "printable"},
      {"/v1/load_lora_adapter", {{"lora_name", "d"}, {"lora_path", a.string()}, {"lora_int_id", 3}}, 400, "unknown field"},
      {"/v1/unload_lora_adapter", {{"lora_name", "zzz"}}, 404, "no adapter"},
  };
  for (const Refusal& f : refusals) {
    r = admin(base->port, f.route, f.body);
    EXPECT_EQ(r.status, f.status) << json::serialize(f.body) << ": " << r.body;
    EXPECT_NE(r.body.find(f.says), std::string::npos) << r.body;
  }
  EXPECT_EQ(models(base->port), before);
  r = http_request(base->port, "POST", "/v1/completions", R"({"model":"zzz","prompt":"x"})");
  EXPECT_EQ(r.status, 404) << r.body;
  EXPECT_NE(r.body.find("adapters \\\"a\\\", \\\"b\\\""), std::string::npos) << r.body;

  // A frontend that holds keys wants one on these routes, and one started without
  // --allow-runtime-lora refuses them.
  uint16_t guarded = 0;
  std::string failure;
  auto keyed = base->inst.frontend(guarded, {"--api-key", "sekrit-key-1"}, {}, &failure);
  ASSERT_TRUE(keyed) << failure;
  r = admin(guarded, "/v1/unload_lora_adapter", {{"lora_name", "a"}});
  EXPECT_EQ(r.status, 401) << r.body;
  r = admin(guarded, "/v1/unload_lora_adapter", {{"lora_name", "a"}}, {{"Authorization", "Bearer sekrit-key-1"}});
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--allow-runtime-lora"), std::string::npos) << r.body;
  EXPECT_EQ(models(base->port), before);

  // Metrics and the access log name the adapter.
  const std::string metrics = http_request(base->port, "GET", "/metrics").body;
  EXPECT_GE(metric_value(metrics, "hearth_lora_requests_total").value_or(0), 6) << metrics;
  EXPECT_EQ(metric_value(metrics, "hearth_lora_adapters_loaded").value_or(0), 2) << metrics;
  EXPECT_NE(metrics.find("hearth_lora_requests_info{max_lora=\"2\""), std::string::npos) << metrics;
  bool logged = false;
  for (const auto deadline = std::chrono::steady_clock::now() + 10s; !logged && std::chrono::steady_clock::now() < deadline;) {
    logged = base->frontend->err().find("finish=length adapter=b") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(logged) << base->frontend->err();
}

// 12 streams, a third each for adapter a, adapter b and the base; a is unloaded while
// they run, and adapter c loaded into its slot (the only free one) and run as soon as the
// unload returns. Every stream ends with the text it gives alone (a's streams finished
// before the slot was freed: had they still run, the engine would have taken c's factors
// into it under them), and a request for a afterwards gets 404; loaded again, a answers
// as before. Then the engine is SIGKILLed in the middle of b's and the base's
// streams: the restarted one adopts their resident KV cache, every check passing.
TEST(LoraServeTest, UnloadingUnderLoadLetsTheAdaptersStreamsFinishAndFailsNone) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  const auto a = dir.path() / "a", b = dir.path() / "b", c = dir.path() / "c";
  synth_adapter(model, a, 8, 1);
  synth_adapter(model, b, 16, 2);
  synth_adapter(model, c, 8, 3);
  ASSERT_FALSE(HasFailure());
  const auto s = serve("loraunload", model,
                       {"--lora", "a=" + a.string(), "--lora", "b=" + b.string(), "--max-loras", "2"},
                       {"--allow-runtime-lora", "--engine-wait", "60000", "--read-timeout", "100"});
  ASSERT_TRUE(s->frontend);

  std::vector<Case> cases = long_streams(12, 300);
  const char* names[] = {"a", "b", ""};
  for (size_t i = 0; i < cases.size(); ++i) {
    if (*names[i % 3] != '\0') cases[i].body["model"] = names[i % 3];
  }
  std::vector<std::string> alone;
  for (const Answer& answer : references(s->port, cases)) {
    ASSERT_EQ(answer.error, "");
    alone.push_back(answer.text);
  }
  EXPECT_NE(alone[0].substr(0, 100), alone[8].substr(0, 100)) << "adapter a changes prompt 0's text";
  EXPECT_NE(alone[4].substr(0, 100), alone[8].substr(0, 100)) << "adapter b changes prompt 0's text";

  {
    ConcurrentStreams streams(s->port, cases);
    ASSERT_TRUE(streams.all_midway(300, 30s)) << "the streams did not start";
    const auto asked = std::chrono::steady_clock::now();
    const auto r = admin(s->port, "/v1/unload_lora_adapter", {{"lora_name", "a"}});
    EXPECT_EQ(r.status, 200) << r.body;  // also past the frontend's 100 ms --read-timeout
    std::printf("[lora] the unload waited %.0f ms for adapter a's streams\n",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - asked).count());
    // a's slot, the only free one, takes another adapter at once, which runs at once: had
    // the unload not waited for a's streams, they would go on with c's factors.
    const auto loaded = admin(s->port, "/v1/load_lora_adapter", {{"lora_name", "c"}, {"lora_path", c.string()}});
    EXPECT_EQ(loaded.status, 200) << loaded.body;
    EXPECT_EQ(json::parse(loaded.body).at("slot").to_number<int64_t>(), 0) << loaded.body;
    EXPECT_FALSE(greedy(s->port, "c", "Once upon a time").empty());
    EXPECT_EQ(streams.texts(), alone);
  }
  auto r = http_request(s->port, "POST", "/v1/completions", R"({"model":"a","prompt":"Once upon a time"})");
  EXPECT_EQ(r.status, 404) << r.body;
  for (const auto& [id, parent] : models(s->port)) EXPECT_NE(id, "a");
  r = admin(s->port, "/v1/unload_lora_adapter", {{"lora_name", "c"}});
  ASSERT_EQ(r.status, 200) << r.body;
  r = admin(s->port, "/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", a.string()}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(references(s->port, {cases[0]})[0].text, alone[0]) << "a loaded again answers as before";

  // The engine killed in the middle of b's and the base's streams.
  std::vector<Case> resumed;
  std::vector<std::string> resumed_alone;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (i % 3 == 0) continue;
    resumed.push_back(cases[i]);
    resumed_alone.push_back(alone[i]);
  }
  const double adopted0 = metric_at(s->port, "hearth_kv_adopted_total");
  const double rejected0 = metric_at(s->port, "hearth_kv_adopt_rejected_total");
  {
    ConcurrentStreams streams(s->port, resumed);
    ASSERT_TRUE(streams.all_midway(300, 30s)) << "the streams did not start";
    s->engine->signal(SIGKILL);
    s->engine->wait(10s);
    std::string failure;
    s->engine = s->inst.engine(kEngineFlags, {}, &failure);
    ASSERT_TRUE(s->engine) << failure;
    EXPECT_EQ(streams.texts(), resumed_alone) << "through an engine SIGKILL";
  }
  EXPECT_GE(metric_at(s->port, "hearth_kv_adopted_total") - adopted0, 6);
  EXPECT_EQ(metric_at(s->port, "hearth_kv_adopt_rejected_total") - rejected0, 0);
}

// An engine that started before the loader made the adapter segment runs no adapter: a
// request naming one is told to restart the engine (503), and so is an unload; the
// restarted engine serves it.
TEST(LoraServeTest, AnEngineStartedBeforeTheAdaptersIsToldToRestart) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  synth_adapter(model, dir.path() / "a", 8, 1);
  ASSERT_FALSE(HasFailure());
  const auto s = serve("loralate", model, {});
  ASSERT_TRUE(s->frontend);
  ASSERT_EQ(s->inst.load(model, {"--lora", "a=" + (dir.path() / "a").string()}), "");
  uint16_t port = 0;
  std::string failure;
  auto frontend = s->inst.frontend(port, {"--allow-runtime-lora"}, {}, &failure);
  ASSERT_TRUE(frontend) << failure;
  auto r = http_request(port, "POST", "/v1/completions", R"({"model":"a","prompt":"Once upon a time","max_tokens":4})");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_NE(r.body.find("restart hearth-engine"), std::string::npos) << r.body;
  r = admin(port, "/v1/unload_lora_adapter", {{"lora_name", "a"}});
  EXPECT_EQ(r.status, 503) << r.body;
  s->engine->signal(SIGTERM);
  s->engine->wait(30s);
  s->engine = s->inst.engine(kEngineFlags, {}, &failure);
  ASSERT_TRUE(s->engine) << failure;
  EXPECT_FALSE(greedy(port, "a", "Once upon a time", 4).empty());
}

// hearth serve --tp 2 --lora: both ranks hold the adapter, each its share (B's rows of
// q/k/v/gate/up, A's columns of o/down); one loaded at run time reaches rank 1 before the
// first step that runs it. Both answer what their merged models answer on one rank.
TEST(LoraServeTest, HearthServeAtTwoRanksServesResidentAndRunTimeAdapters) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir dir;
  const auto [a, b] = two_adapters(model, dir.path());
  ASSERT_FALSE(HasFailure());
  const auto merged_a = serve("loratpma", dir.path() / "merged_a.gguf", {});
  const auto merged_b = serve("loratpmb", dir.path() / "merged_b.gguf", {});
  ASSERT_TRUE(merged_a->frontend && merged_b->frontend);
  TempDir shm(shm_parent());
  ChildProcess served({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "loratp",
                       "--shm-dir", shm.path().string(), "--tp", "2", "--threads", "1", "--ctx", "512", "--slots", "16",
                       "--lora", "a=" + a.string(), "--max-loras", "2", "--max-lora-rank", "16",
                       "--allow-runtime-lora"});
  const auto line = served.read_line(60s);
  ASSERT_TRUE(line.has_value()) << served.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));
  const char* prompts[] = {"Once upon a time", "The little dog"};
  for (const char* prompt : prompts) EXPECT_EQ(greedy(port, "a", prompt), greedy(merged_a->port, "", prompt)) << prompt;
  const auto r = admin(port, "/v1/load_lora_adapter", {{"lora_name", "b"}, {"lora_path", b.string()}});
  ASSERT_EQ(r.status, 200) << r.body;
  for (const char* prompt : prompts) EXPECT_EQ(greedy(port, "b", prompt), greedy(merged_b->port, "", prompt)) << prompt;
  const json::object lora = status_of(shm.path(), "loratp").at("lora").as_object();
  EXPECT_EQ(lora.at("adapters").as_array().size(), 2u) << json::serialize(lora);
  served.signal(SIGTERM);
  EXPECT_EQ(served.wait(60s), 0) << served.err();
}

}  // namespace
}  // namespace hearth::testing
