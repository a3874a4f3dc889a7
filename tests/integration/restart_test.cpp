// Restarts without loss, with real processes and real HTTP: the frontend replaced five
// times under load (hearth serve started by systemd-socket-activate, so the listening
// socket comes through the real LISTEN_FDS handoff), the engine killed with SIGKILL in
// the middle of 16 streams, one of two frontends killed, an engine away for longer
// than the frontend waits, and a mixture of experts through a frontend SIGHUP and an
// engine SIGKILL.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include <boost/json.hpp>

#include "common/process.h"
#include "ipc/kv_segment.h"
#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;

int64_t free_slots(const std::filesystem::path& shm, const std::string& instance) {
  const auto s = status_of(shm, instance);
  if (!s.contains("broker")) return -1;
  const auto& states = s.at("broker").at("slot_states").as_object();
  return states.contains("FREE") ? states.at("FREE").to_number<int64_t>() : 0;
}

// The last `n` bytes of a process's log (a failure shows what led to it).
std::string tail_of(const std::string& log, size_t n) {
  return log.size() <= n ? log : "..." + log.substr(log.size() - n);
}

// Keeps `clients` requests in flight until stopped; each answer is checked against its
// reference.
class LoadGenerator {
 public:
  LoadGenerator(uint16_t port, std::vector<Case> cases, std::vector<Answer> refs, int clients)
      : port_(port), cases_(std::move(cases)), refs_(std::move(refs)) {
    for (int t = 0; t < clients; ++t) {
      threads_.emplace_back([this, t] {
        for (size_t n = static_cast<size_t>(t); !stop_.load(); n += 7) {
          const size_t k = n % cases_.size();
          const Case& c = cases_[k];
          const Answer a = answer_of(c, http_request_streamed(port_, target_of(c), json::serialize(c.body)));
          std::lock_guard lock(mutex_);
          ++done_;
          if (!a.error.empty()) {
            failures_.push_back("case " + std::to_string(k) + ": " + a.error);
          } else if (a.text != refs_[k].text) {
            failures_.push_back("case " + std::to_string(k) + ": text differs: \"" + a.text + "\" vs \"" +
                                refs_[k].text + "\"");
          }
          progress_.notify_all();
        }
      });
    }
  }
  ~LoadGenerator() { finish(); }
  void finish() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  int done() {
    std::lock_guard lock(mutex_);
    return done_;
  }
  // Waits until `n` more answers have come in (or `timeout`); false on timeout.
  bool wait_answers(int n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    const int target = done_ + n;
    return progress_.wait_for(lock, timeout, [&] { return done_ >= target; });
  }
  std::vector<std::string> failures() {
    std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  uint16_t port_;
  std::vector<Case> cases_;
  std::vector<Answer> refs_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable progress_;
  int done_ = 0;
  std::vector<std::string> failures_;
  std::vector<std::thread> threads_;
};

std::string socket_activate_path() {
  for (const char* p : {"/usr/bin/systemd-socket-activate", "/bin/systemd-socket-activate"}) {
    if (::access(p, X_OK) == 0) return p;
  }
  return "";
}

TEST(RestartTest, FrontendRestartedFiveTimesUnderLoadFailsNothing) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  const std::string activate = socket_activate_path();
  if (activate.empty()) GTEST_SKIP() << "systemd-socket-activate is absent (Debian package systemd)";
  TempDir shm(shm_parent());
  const uint16_t port = free_port();
  // systemd-socket-activate listens, then (at the first connection) execs hearth serve
  // with the socket as LISTEN_FDS; serve hands it to each frontend it starts.
  ChildProcess serve({activate, "-l", "127.0.0.1:" + std::to_string(port), hearth_bin("hearth"), "serve", "--model",
                      model.string(), "--instance", "restart", "--shm-dir", shm.path().string(), "--ctx", "256",
                      "--slots", "64", "--drain-timeout", "20000", "--chat-template",
                      plain_chat_template()});
  // It says when it listens; the first connection then starts serve.
  for (auto deadline = std::chrono::steady_clock::now() + 30s;
       serve.err().find("Listening on") == std::string::npos && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(5ms);
  }
  const auto health = http_request(port, "GET", "/health");
  ASSERT_EQ(health.status, 200) << health.error << serve.err();

  const auto cases = load_cases();
  const auto refs = references(port, cases);
  for (const Answer& a : refs) ASSERT_EQ(a.error, "");
  std::set<int> frontends;
  for (int pid : children_of(serve.pid(), "hearth-frontend")) frontends.insert(pid);
  ASSERT_EQ(frontends.size(), 1u) << serve.err();

  LoadGenerator load(port, cases, refs, 32);
  const auto start = std::chrono::steady_clock::now();
  // Five restarts, each once the load has had 300 answers since the last one ended:
  // three by SIGHUP to serve (a new frontend starts on the socket, then the old one
  // drains) and two by SIGTERM to the frontend itself (it drains and exits; serve starts
  // another; meanwhile connections wait in the queue).
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(load.wait_answers(300, 60s)) << "the load stalled before restart " << i;
    const auto before = children_of(serve.pid(), "hearth-frontend");
    ASSERT_EQ(before.size(), 1u) << "a previous frontend is still draining";
    if (i % 2 == 0) {
      serve.signal(SIGHUP);
    } else {
      ::kill(before[0], SIGTERM);
    }
    // Wait for the replacement to be the only frontend.
    const auto deadline = std::chrono::steady_clock::now() + 15s;
    while (std::chrono::steady_clock::now() < deadline) {
      const auto now = children_of(serve.pid(), "hearth-frontend");
      if (now.size() == 1 && now[0] != before[0]) {
        frontends.insert(now[0]);
        break;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  EXPECT_TRUE(load.wait_answers(300, 60s)) << "the load stalled after the last restart";
  load.finish();
  const auto failures = load.failures();
  EXPECT_EQ(frontends.size(), 6u) << "every restart brings a new frontend";
  EXPECT_GE(load.done(), 1800);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << load.done() << " requests failed; first: "
                                << failures.front() << "\nhearth serve's log, last part:\n"
                                << tail_of(serve.err(), 8000);
  std::printf("[restart] %d requests in %.1f s, frontend restarted 5 times, %zu failed\n", load.done(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), failures.size());
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << serve.err();
}

TEST(RestartTest, EngineKilledMidStreamResumesEveryStreamIdentically) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm(shm_parent());
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "crash",
                      "--shm-dir", shm.path().string(), "--ctx", "512", "--slots", "32", "--threads", "1",
                      "--chat-template", plain_chat_template()});
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));

  // Every prompt opens with the same story, so the second run's requests find its blocks
  // in the prefix cache: the engine that dies holds cached prefixes.
  auto cases = long_streams(16);
  for (Case& c : cases) {
    c.body["prompt"] = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
                       std::string(c.body["prompt"].as_string());
  }
  std::vector<std::string> refs;  // uninterrupted answers
  {
    ConcurrentStreams uninterrupted(port, cases);
    uninterrupted.join();
    for (const auto& a : uninterrupted.answers) {
      ASSERT_EQ(a.error, "") << serve.err();
      refs.push_back(a.text);
    }
  }
  const auto weights_before = status_of(shm.path(), "crash").at("weights").as_object();
  const auto engines = children_of(serve.pid(), "hearth-engine");
  ASSERT_EQ(engines.size(), 1u);

  ConcurrentStreams streams(port, cases);
  ASSERT_TRUE(streams.all_midway(600, 30s)) << "the streams did not start";
  const int cut = streams.unfinished();
  ::kill(engines[0], SIGKILL);
  streams.join();
  EXPECT_EQ(cut, 16) << "streams that were still running when the engine died";
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(streams.answers[i].error, "") << "stream " << i;
    EXPECT_EQ(streams.answers[i].text, refs[i]) << "stream " << i;
  }
  const std::string metrics = http_request(port, "GET", "/metrics").body;
  const auto hits = metric_value(metrics, "hearth_prefix_cache_hits_total");
  EXPECT_GT(hits.value_or(0), 0) << "no request found a cached block\n" << metrics;
  // A new engine (epoch 2) served them on the same weights: the segment was neither
  // rebuilt nor adopted by another loader.
  const auto after = status_of(shm.path(), "crash");
  EXPECT_EQ(after.at("broker").at("engine_epoch").to_number<int64_t>(), 2);
  const auto& weights_after = after.at("weights").as_object();
  for (const char* key : {"created", "creator_pid", "loader_pid", "fingerprint"}) {
    EXPECT_EQ(json::serialize(weights_after.at(key)), json::serialize(weights_before.at(key))) << key;
  }
  EXPECT_NE(children_of(serve.pid(), "hearth-engine"), engines);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << serve.err();
}

// A mixture of experts (hearth synth's qwen3moe: 8 experts, 2 per token) under hearth
// serve: 16 concurrent streams, whose steps batch tokens routed to different experts,
// give the text each gives alone; then neither a frontend replaced with SIGHUP nor the
// engine killed with SIGKILL in the middle of them loses or changes any.
TEST(RestartTest, AMixtureOfExpertsServesSixteenStreamsAsOneAndLosesNothingToRestarts) {
  TempDir models;
  const auto model = models.path() / "moe.gguf";
  ChildProcess synth({hearth_bin("hearth"), "synth", "--arch", "qwen3moe", "--experts", "8", "--experts-used", "2",
                      "--type", "f16", "--gguf", model.string()});
  ASSERT_EQ(synth.wait(60s), 0) << synth.err();
  TempDir shm(shm_parent());
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "moe",
                      "--shm-dir", shm.path().string(), "--ctx", "512", "--slots", "32", "--threads", "1",
                      "--chat-template", plain_chat_template()});
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));

  const auto cases = long_streams(16, 150);
  std::vector<std::string> alone;  // each request by itself
  for (const Answer& a : references(port, cases)) {
    ASSERT_EQ(a.error, "") << tail_of(serve.err(), 4000);
    alone.push_back(a.text);
  }
  std::set<std::string> distinct(alone.begin(), alone.end());
  EXPECT_GE(distinct.size(), 4u) << "the four prompts should lead to different texts";
  {
    ConcurrentStreams together(port, cases);
    EXPECT_EQ(together.texts(), alone) << "16 streams at once";
  }
  {
    ConcurrentStreams streams(port, cases);
    ASSERT_TRUE(streams.all_midway(300, 30s)) << "the streams did not start";
    serve.signal(SIGHUP);  // a new frontend; this one drains
    EXPECT_EQ(streams.texts(), alone) << "through a frontend SIGHUP";
  }
  const auto engines = children_of(serve.pid(), "hearth-engine");
  ASSERT_EQ(engines.size(), 1u);
  {
    ConcurrentStreams streams(port, cases);
    ASSERT_TRUE(streams.all_midway(300, 30s)) << "the streams did not start";
    const int cut = streams.unfinished();
    ::kill(engines[0], SIGKILL);
    EXPECT_EQ(streams.texts(), alone) << "through an engine SIGKILL";
    EXPECT_GT(cut, 0) << "no stream was running when the engine died";
  }
  EXPECT_EQ(status_of(shm.path(), "moe").at("broker").at("engine_epoch").to_number<int64_t>(), 2);
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << tail_of(serve.err(), 4000);
}

// A tensor-parallel group of two ranks under hearth serve --tp 2: one rank killed with
// SIGKILL in the middle of 16 streams. The survivor sees its partner gone, the epoch
// ends, hearth serve restarts the dead rank, the group forms again (epoch 2) and rank 0
// resumes every stream from the broker: each ends with the text it would have had. Each
// rank's share of the KV cache is resident (hearth.tp.kv and hearth.tp.kv-rank1), so
// every stream is adopted, whichever rank died, with no check failing; unless the dead
// rank's segment is gone when it starts again (it builds an empty one): then rank 0
// adopts nothing and every stream is computed again. Or both ranks die, rank 1 while
// hearth serve is starting rank 0 again (which is ready only once rank 1 has joined
// it; frozen until then, so that it cannot): serve starts rank 1 again meanwhile, and
// the streams resume well within rank 0's 120 s start timeout.
struct RankKill {
  int victim;           // 0, 1, or kBothRanks
  bool remove_segment;  // the victim's resident KV segment, right after the kill
};
constexpr int kBothRanks = 2;

class TensorParallelRestartTest : public ::testing::TestWithParam<RankKill> {};

TEST_P(TensorParallelRestartTest, RankKilledMidStreamResumesEveryStreamIdentically) {
  const int victim = GetParam().victim;
  const bool remove_segment = GetParam().remove_segment;
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm(shm_parent());
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "tp",
                      "--shm-dir", shm.path().string(), "--ctx", "512", "--slots", "32", "--tp", "2",
                      "--kv-blocks", "1024",  // room for every stream: none is preempted (holding nothing) at the kill
                      "--chat-template", plain_chat_template()});
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));
  auto rank_pid = [&](int r) -> int64_t {
    const auto s = status_of(shm.path(), "tp");
    if (!s.contains("tp")) return -1;
    return s.at("tp").at("ranks").at(static_cast<size_t>(r)).at("pid").to_number<int64_t>();
  };

  const auto cases = long_streams(16);
  std::vector<std::string> refs;
  {
    ConcurrentStreams uninterrupted(port, cases);
    uninterrupted.join();
    for (const auto& a : uninterrupted.answers) {
      ASSERT_EQ(a.error, "") << serve.err();
      refs.push_back(a.text);
    }
  }
  const int64_t pid = rank_pid(victim == kBothRanks ? 0 : victim);
  const int64_t pid1 = rank_pid(1);
  ASSERT_GT(pid, 0);
  ASSERT_GT(pid1, 0);
  EXPECT_TRUE(std::filesystem::exists(shm.path() / "hearth.tp.kv"));
  EXPECT_TRUE(std::filesystem::exists(shm.path() / "hearth.tp.kv-rank1"));
  auto counter = [&](const char* name) {
    return metric_value(http_request(port, "GET", "/metrics").body, name).value_or(-1);
  };
  ConcurrentStreams streams(port, cases);
  ASSERT_TRUE(streams.all_midway(600, 30s)) << "the streams did not start";
  const int cut = streams.unfinished();
  const auto engines = children_of(serve.pid(), "hearth-engine");
  // Rank 1, frozen, cannot join the new rank 0's group before it dies in turn (and dies
  // whatever this test does next).
  struct KillOnExit {
    pid_t pid;
    ~KillOnExit() {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
  } frozen{victim == kBothRanks ? static_cast<pid_t>(pid1) : 0};
  if (victim == kBothRanks) ::kill(static_cast<pid_t>(pid1), SIGSTOP);
  ::kill(static_cast<pid_t>(pid), SIGKILL);
  // hearth serve notices the death within 200 ms and the new process then starts up:
  // the file is long gone when it looks for it.
  if (remove_segment) std::filesystem::remove(shm.path() / "hearth.tp.kv-rank1");
  const auto killed = std::chrono::steady_clock::now();
  if (victim == kBothRanks) {
    auto replaced = [&] {
      for (int p : children_of(serve.pid(), "hearth-engine")) {
        if (std::find(engines.begin(), engines.end(), p) == engines.end()) return true;
      }
      return false;
    };
    for (int i = 0; i < 300 && !replaced(); ++i) std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(replaced()) << "hearth serve did not start rank 0 again\n" << serve.err();
    ::kill(static_cast<pid_t>(pid1), SIGKILL);
    frozen.pid = 0;
  }
  streams.join();
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 60s) << "the group came back only after a start timed out";
  EXPECT_EQ(cut, 16) << "streams that were still running when rank " << victim << " died";
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(streams.answers[i].error, "") << "stream " << i;
    EXPECT_EQ(streams.answers[i].text, refs[i]) << "stream " << i;
  }
  const auto after = status_of(shm.path(), "tp");
  ASSERT_TRUE(after.contains("tp"));
  const auto& group = after.at("tp").as_object();
  if (victim != kBothRanks) {
    EXPECT_EQ(group.at("group_epoch").to_number<int64_t>(), 2);
    EXPECT_EQ(group.at("group_restarts").to_number<int64_t>(), 1);
    EXPECT_NE(rank_pid(victim), pid) << "a new process serves rank " << victim;
  } else {
    EXPECT_NE(rank_pid(0), pid) << "a new process serves rank 0";
    EXPECT_NE(rank_pid(1), pid1) << "a new process serves rank 1";
    // Rank 0 waited for rank 1 and was not given up on.
    EXPECT_EQ(serve.err().find("did not become ready"), std::string::npos) << serve.err();
  }
  EXPECT_EQ(group.at("group_state").as_string(), "active");
  // /metrics says so too.
  const auto metrics = http_request(port, "GET", "/metrics", "");
  if (victim != kBothRanks) {
    EXPECT_EQ(metric_value(metrics.body, "hearth_tp_group_restarts_total"), 1.0) << metrics.body;
  }
  EXPECT_EQ(counter("hearth_kv_adopted_total"), remove_segment ? 0 : 16) << serve.err();
  EXPECT_EQ(counter("hearth_kv_adopt_rejected_total"), 0) << serve.err();
  if (remove_segment) {
    EXPECT_NE(serve.err().find("hold another KV cache than the one the tables describe"), std::string::npos)
        << serve.err();
  }
  EXPECT_NE(metrics.body.find("hearth_tp_rank_up{rank=\"1\"} 1"), std::string::npos) << metrics.body;
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << serve.err();
}

INSTANTIATE_TEST_SUITE_P(Rank, TensorParallelRestartTest,
                         ::testing::Values(RankKill{1, false}, RankKill{0, false}, RankKill{1, true},
                                           RankKill{kBothRanks, false}),
                         [](const auto& p) {
                           if (p.param.victim == kBothRanks) return std::string("both");
                           return "rank" + std::to_string(p.param.victim) + (p.param.remove_segment ? "_rebuilt" : "");
                         });

// The resident KV cache across engine crashes, with real processes: 16 streams, the
// engine SIGKILLed in the middle of them and started again, three times. First it adopts
// what its predecessor left (no request is computed again); then the segment's keys are
// overwritten before the restart, so every adopted sequence fails its check and is
// computed again; then it runs with --no-kv-adopt. Every stream ends with the text of an
// uninterrupted run each time.
TEST(RestartTest, ARestartedEngineAdoptsTheResidentKvCacheAndRecomputesADamagedOne) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance p("kvadopt");
  ASSERT_EQ(p.load(model), "");
  // Room for every stream's blocks, so that none is preempted (and holds nothing) at the kill.
  const std::vector<std::string> flags = {"--ctx", "512", "--slots", "32", "--threads", "1", "--kv-blocks", "1024"};
  std::string failure;
  auto engine = p.engine(flags, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  uint16_t port = 0;
  auto frontend = p.frontend(port, {"--engine-wait", "60000"}, {}, &failure);
  ASSERT_TRUE(frontend) << failure;
  const auto kv_path = p.shm() / "hearth.kvadopt.kv";
  EXPECT_TRUE(std::filesystem::exists(kv_path));

  const auto cases = long_streams(16);
  const std::vector<std::string> refs = ConcurrentStreams(port, cases).texts();
  ASSERT_FALSE(HasFailure());
  auto counter = [&](const char* name) { return metric_at(port, name); };
  // A finished request's blocks stay in the prefix cache; after a restart the same prompt
  // finds them in the adopted segment's index.
  std::string story;
  for (int i = 0; i < 6; ++i) story += "Once upon a time, there was a little girl named Lily. She loved to play. ";
  const std::string repeat = json::serialize(json::object{{"prompt", story}, {"max_tokens", 4}, {"temperature", 0}});
  auto cached_tokens = [&] {
    const auto r = http_request(port, "POST", "/v1/completions", repeat);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body).at("usage").at("prompt_tokens_details").at("cached_tokens").to_number<int64_t>();
  };
  cached_tokens();  // computes it (a stream's story may have shared its first block)
  EXPECT_GE(cached_tokens(), 64) << "found before any restart";
  enum class Restart { kAdopt, kDamaged, kNoAdopt };
  for (Restart how : {Restart::kAdopt, Restart::kDamaged, Restart::kNoAdopt}) {
    SCOPED_TRACE(static_cast<int>(how));
    const double adopted0 = counter("hearth_kv_adopted_total"), rejected0 = counter("hearth_kv_adopt_rejected_total");
    ConcurrentStreams streams(port, cases);
    ASSERT_TRUE(streams.all_midway(600, 30s)) << "the streams did not start";
    engine->signal(SIGKILL);
    engine->wait(10s);
    if (how == Restart::kDamaged) {
      // Every key of every layer becomes NaN (f16 0xFFFF): no check row can match.
      KvHeader h{};
      std::fstream f(kv_path, std::ios::in | std::ios::out | std::ios::binary);
      ASSERT_TRUE(f.read(reinterpret_cast<char*>(&h), sizeof(h)));
      ASSERT_EQ(h.prologue.magic, kKvMagic);
      const std::string nan(static_cast<size_t>(h.layer_bytes * static_cast<uint64_t>(h.geometry.n_layers)), '\xff');
      f.seekp(static_cast<std::streamoff>(h.k_offset));
      ASSERT_TRUE(f.write(nan.data(), static_cast<std::streamsize>(nan.size())));
    }
    std::vector<std::string> restart_flags = flags;
    if (how == Restart::kNoAdopt) restart_flags.push_back("--no-kv-adopt");
    const auto restarted_at = std::chrono::steady_clock::now();
    engine = p.engine(restart_flags, {}, &failure);
    ASSERT_TRUE(engine) << failure;
    std::vector<size_t> at_restart(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) at_restart[i] = streams.progress[i].load();
    double all_moving_ms = -1;
    for (const auto deadline = restarted_at + 30s; std::chrono::steady_clock::now() < deadline;) {
      bool all = true;
      for (size_t i = 0; i < cases.size(); ++i) all = all && (streams.progress[i].load() > at_restart[i] || streams.finished[i]);
      if (all) {
        all_moving_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - restarted_at).count();
        break;
      }
      std::this_thread::sleep_for(1ms);
    }
    streams.join();
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(streams.answers[i].error, "") << "stream " << i;
      EXPECT_EQ(streams.answers[i].text, refs[i]) << "stream " << i;
    }
    const double adopted = counter("hearth_kv_adopted_total") - adopted0;
    const double rejected = counter("hearth_kv_adopt_rejected_total") - rejected0;
    std::printf("[restart] restart %d: %.0f adopted, %.0f rejected; every stream moving %.0f ms after the engine start\n",
                static_cast<int>(how), adopted, rejected, all_moving_ms);
    // A stream whose table was torn by the kill itself (killed between writing a check and
    // advancing `committed`) is computed again without a check: at most one step's worth.
    switch (how) {
      case Restart::kAdopt:
        EXPECT_GE(adopted, 14) << "streams cut: " << cases.size();
        EXPECT_EQ(rejected, 0);
        EXPECT_GE(cached_tokens(), 64) << "the prefix cache is warm after the restart";
        break;
      case Restart::kDamaged:
        EXPECT_EQ(adopted, 0);
        EXPECT_GE(rejected, 14);
        break;
      case Restart::kNoAdopt:
        EXPECT_EQ(adopted, 0);
        EXPECT_EQ(rejected, 0);
        EXPECT_FALSE(std::filesystem::exists(kv_path)) << "--no-kv-adopt leaves no resident cache behind";
        break;
    }
  }
}

const std::vector<std::string> kEngineFlags = {"--ctx", "512", "--slots", "32", "--threads", "1"};

TEST(RestartTest, AKilledFrontendLeavesTheOtherAloneAndItsSlotsComeBack) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance p("twofe");
  ASSERT_EQ(p.load(model), "");
  std::string failure;
  auto engine = p.engine(kEngineFlags, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  uint16_t port_a = 0, port_b = 0;
  auto a = p.frontend(port_a, {}, {}, &failure);
  ASSERT_TRUE(a) << failure;
  auto b = p.frontend(port_b, {}, {}, &failure);
  ASSERT_TRUE(b) << failure;

  const auto cases = long_streams(8);
  std::vector<std::string> refs;
  {
    ConcurrentStreams solo(port_b, cases);
    solo.join();
    for (const auto& ans : solo.answers) refs.push_back(ans.text);
  }
  ConcurrentStreams on_a(port_a, cases);
  ConcurrentStreams on_b(port_b, cases);
  ASSERT_TRUE(on_a.all_midway(600, 30s) && on_b.all_midway(600, 30s));
  a->signal(SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  on_a.join();
  on_b.join();
  for (size_t i = 0; i < cases.size(); ++i) {
    EXPECT_EQ(on_b.answers[i].error, "") << i;
    EXPECT_EQ(on_b.answers[i].text, refs[i]) << i;
    EXPECT_NE(on_a.answers[i].error, "") << "a stream of the killed frontend cannot have completed";
  }
  // Every slot is free again well within the stale-heartbeat bound (5 s) once the other
  // frontend's streams are done: the dead frontend's were cancelled and reclaimed by the
  // engine at once, since its pid is gone. (The bound is generous; the reclaim takes one
  // engine step and a sweep. It counts from the joins: under a sanitizer the other
  // frontend's streams may outlast it.)
  int64_t free = -1;
  for (const auto joined = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - joined < 5s;) {
    free = free_slots(p.shm(), "twofe");
    if (free == 32) break;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(free, 32);
  std::printf("[restart] slots of the killed frontend free after %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - killed_at)
                                         .count()));
}

TEST(RestartTest, NoEngineForLongerThanTheWaitMeans503ThenServiceResumes) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Instance p("noengine");
  ASSERT_EQ(p.load(model), "");
  std::string failure;
  auto engine = p.engine(kEngineFlags, {}, &failure);
  ASSERT_TRUE(engine) << failure;
  uint16_t port = 0;
  auto frontend = p.frontend(port, {"--engine-wait", "1000"}, {}, &failure);
  ASSERT_TRUE(frontend) << failure;
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})";
  const auto before = http_request(port, "POST", "/v1/completions", body);
  ASSERT_EQ(before.status, 200);
  EXPECT_EQ(http_request(port, "GET", "/ready").status, 200);

  engine->signal(SIGKILL);
  engine->wait(5s);
  const auto t0 = std::chrono::steady_clock::now();
  const auto plain = http_request(port, "POST", "/v1/completions", body);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(plain.status, 503) << plain.body;
  EXPECT_EQ(plain.headers.count("retry-after"), 1u);
  EXPECT_NE(plain.body.find("\"error\""), std::string::npos);
  // Time is the behaviour here: the request waits --engine-wait (1000 ms) from its
  // arrival. The bounds are generous (the frontend's clock starts a little after ours;
  // a loaded machine may answer late), not a measure of speed.
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 5s);
  // The engine has been gone for longer than the wait now: what comes next is answered
  // 503 at once (a streamed request too, with a real status), not after another wait.
  const auto t1 = std::chrono::steady_clock::now();
  const auto streamed = http_request(port, "POST", "/v1/completions",
                                     R"({"prompt": "Once upon a time", "max_tokens": 8, "stream": true})");
  EXPECT_EQ(streamed.status, 503) << streamed.body;
  EXPECT_EQ(streamed.headers.count("retry-after"), 1u);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 800ms) << "answered at once, not after --engine-wait";
  const auto ready = http_request(port, "GET", "/ready");
  EXPECT_EQ(ready.status, 503);
  EXPECT_GE(metric_value(http_request(port, "GET", "/metrics").body, "hearth_requests_rejected_total").value_or(0), 1);

  // A frontend that waits longer for engines (a restart in progress, as a supervisor
  // makes one): its request waits in its slot and is served when the engine is back, and
  // so is everything after. (The engine starts from this thread: a child's parent-death
  // signal follows the thread that started it.)
  uint16_t patient_port = 0;
  auto patient = p.frontend(patient_port, {"--engine-wait", "60000"}, {}, &failure);
  ASSERT_TRUE(patient) << failure;
  HttpResponse resumed;
  std::thread waiting([&] { resumed = http_request(patient_port, "POST", "/v1/completions", body); });
  // The request waits in its slot (QUEUED) before the engine starts.
  for (auto deadline = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < deadline;) {
    const auto st = status_of(p.shm(), "noengine");
    if (st.contains("broker") && st.at("broker").at("slot_states").as_object().contains("QUEUED")) break;
    std::this_thread::sleep_for(10ms);
  }
  engine = p.engine(kEngineFlags, {}, &failure);
  waiting.join();
  ASSERT_TRUE(engine) << failure;
  EXPECT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(json::parse(resumed.body).at("choices").at(0).at("text"), json::parse(before.body).at("choices").at(0).at("text"));
  // The first frontend sees the engine back within a round of its pump.
  int ready_status = 0;
  for (auto deadline = std::chrono::steady_clock::now() + 5s;
       ready_status != 200 && std::chrono::steady_clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
    ready_status = http_request(port, "GET", "/ready").status;
  }
  EXPECT_EQ(ready_status, 200);
  EXPECT_EQ(http_request(port, "POST", "/v1/completions", body).status, 200) << "served again at once";
}

}  // namespace
}  // namespace hearth::testing
