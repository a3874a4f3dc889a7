// Restarts without loss, with real processes and real HTTP: the frontend replaced five
// times under load (hearth serve started by systemd-socket-activate, so the listening
// socket comes through the real LISTEN_FDS handoff), the engine killed with SIGKILL in
// the middle of 16 streams, one of two frontends killed, and an engine away for longer
// than the frontend waits.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <boost/json.hpp>

#include "common/process.h"
#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/test_util.h"

namespace hearth::testing {
namespace {

using namespace std::chrono_literals;
namespace json = boost::json;

std::filesystem::path shm_parent() {
  return ::access("/dev/shm", W_OK) == 0 ? std::filesystem::path("/dev/shm") : std::filesystem::path();
}

uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// `hearth status --json` for one instance: {"broker": {...}, "weights": {...}}.
json::object status_of(const std::filesystem::path& shm, const std::string& instance) {
  const auto r = run_process({hearth_bin("hearth"), "status", "--json", "--instance", instance, "--shm-dir", shm.string()});
  json::object out;
  if (r.exit_code != 0) return out;
  const json::value v = json::parse(r.out);
  if (!v.as_object().contains(instance)) return out;
  for (const auto& seg : v.at(instance).as_array()) out[seg.at("segment").as_string()] = seg;
  return out;
}

int64_t free_slots(const std::filesystem::path& shm, const std::string& instance) {
  const auto s = status_of(shm, instance);
  if (!s.contains("broker")) return -1;
  const auto& states = s.at("broker").at("slot_states").as_object();
  return states.contains("FREE") ? states.at("FREE").to_number<int64_t>() : 0;
}

// One kind of request the load sends, and the text it must produce.
struct Case {
  bool chat = false;
  bool stream = false;
  json::object body;
};

std::string target_of(const Case& c) { return c.chat ? "/v1/chat/completions" : "/v1/completions"; }

// The generated text of a complete, successful response, or an error describing what
// was wrong with it.
struct Answer {
  std::string text;
  std::string error;
};

Answer answer_of(const Case& c, const HttpResponse& r) {
  if (r.status != 200) return {"", "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body.substr(0, 300)};
  try {
    if (!c.stream) {
      const json::value parsed = json::parse(r.body);
      const auto& choice = parsed.at("choices").at(0);
      if (choice.at("finish_reason").is_null()) return {"", "no finish_reason"};
      return {std::string(c.chat ? choice.at("message").at("content").as_string() : choice.at("text").as_string()), ""};
    }
    const auto events = sse_events(r.body);
    if (events.empty() || events.back() != "[DONE]") return {"", "the stream did not end with [DONE]: " + r.body};
    std::string text;
    bool finished = false;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
      const json::value v = json::parse(events[i]);
      if (v.as_object().contains("error")) return {"", "error event: " + events[i]};
      for (const auto& ch : v.at("choices").as_array()) {
        if (!ch.at("finish_reason").is_null()) finished = true;
        if (c.chat) {
          if (const auto* content = ch.at("delta").as_object().if_contains("content"); content && content->is_string()) {
            text += content->as_string();
          }
        } else {
          text += ch.at("text").as_string();
        }
      }
    }
    if (!finished) return {"", "no finish_reason in the stream"};
    return {text, ""};
  } catch (const std::exception& e) {
    return {"", std::string("unparsable: ") + e.what() + " in " + r.body.substr(0, 300)};
  }
}

// Requests of every kind: completions and chat, streamed and not, greedy and seeded
// sampling (a seed makes the answer as reproducible as greedy), several prompts and
// lengths.
std::vector<Case> load_cases() {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to", "One day, a bird"};
  std::vector<Case> cases;
  for (int i = 0; i < 16; ++i) {
    Case c;
    c.chat = i % 4 == 3;
    c.stream = i % 2 == 1;
    c.body = {{"max_tokens", 24 + 8 * (i % 5)}, {"temperature", i % 3 == 2 ? 0.8 : 0.0}, {"seed", 100 + i}};
    if (c.chat) {
      c.body["messages"] = json::array{json::object{{"role", "user"}, {"content", prompts[i % 4]}}};
    } else {
      c.body["prompt"] = prompts[i % 4];
    }
    if (c.stream) c.body["stream"] = true;
    cases.push_back(std::move(c));
  }
  return cases;
}

// The answer each case gives, asked once, not streamed, before anything is restarted.
std::vector<std::string> references(uint16_t port, const std::vector<Case>& cases) {
  std::vector<std::string> out;
  for (const Case& c : cases) {
    Case plain = c;
    plain.stream = false;
    plain.body.erase("stream");
    const auto a = answer_of(plain, http_request(port, "POST", target_of(plain), json::serialize(plain.body)));
    EXPECT_EQ(a.error, "");
    out.push_back(a.text);
  }
  return out;
}

// Keeps `clients` requests in flight until stopped; each answer is checked against its
// reference.
class LoadGenerator {
 public:
  LoadGenerator(uint16_t port, std::vector<Case> cases, std::vector<std::string> refs, int clients)
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
          } else if (a.text != refs_[k]) {
            failures_.push_back("case " + std::to_string(k) + ": text differs: \"" + a.text + "\" vs \"" + refs_[k] +
                                "\"");
          }
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
  std::vector<std::string> failures() {
    std::lock_guard lock(mutex_);
    return failures_;
  }

 private:
  uint16_t port_;
  std::vector<Case> cases_;
  std::vector<std::string> refs_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
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
                      "--slots", "64", "--drain-timeout", "20000"});
  std::this_thread::sleep_for(200ms);  // listening
  const auto health = http_request(port, "GET", "/health");  // the first connection starts serve
  ASSERT_EQ(health.status, 200) << health.error << serve.err();

  const auto cases = load_cases();
  const auto refs = references(port, cases);
  std::set<int> frontends;
  for (int pid : children_of(serve.pid(), "hearth-frontend")) frontends.insert(pid);
  ASSERT_EQ(frontends.size(), 1u) << serve.err();

  LoadGenerator load(port, cases, refs, 32);
  const auto start = std::chrono::steady_clock::now();
  // Five restarts over 20 seconds: three by SIGHUP to serve (a new frontend starts on the
  // socket, then the old one drains) and two by SIGTERM to the frontend itself (it
  // drains and exits; serve starts another; meanwhile connections wait in the queue).
  for (int i = 0; i < 5; ++i) {
    std::this_thread::sleep_until(start + std::chrono::milliseconds(2000 + 3500 * i));
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
  std::this_thread::sleep_until(start + 20s);
  load.finish();
  const auto failures = load.failures();
  EXPECT_EQ(frontends.size(), 6u) << "every restart brings a new frontend";
  EXPECT_GT(load.done(), 200);
  EXPECT_TRUE(failures.empty()) << failures.size() << " of " << load.done() << " requests failed; first: "
                                << failures.front();
  std::printf("[restart] %d requests over 20 s, frontend restarted 5 times, %zu failed\n", load.done(),
              failures.size());
  serve.signal(SIGTERM);
  EXPECT_EQ(serve.wait(60s), 0) << serve.err();
}

// Greedy streams that run long enough to be cut by an engine kill.
std::vector<Case> long_streams(int n) {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to", "One day, a bird"};
  std::vector<Case> out;
  for (int i = 0; i < n; ++i) {
    Case c;
    c.stream = true;
    c.body = {{"prompt", prompts[i % 4]}, {"max_tokens", 300 + 10 * i}, {"temperature", 0}, {"ignore_eos", true},
              {"stream", true}};
    out.push_back(std::move(c));
  }
  return out;
}

// Runs `cases` concurrently; `progress[i]` counts the bytes stream i has received.
struct ConcurrentStreams {
  std::vector<Answer> answers;
  std::vector<std::atomic<size_t>> progress;
  std::vector<std::atomic<bool>> finished;
  std::vector<std::thread> threads;
  ConcurrentStreams(uint16_t port, const std::vector<Case>& cases)
      : answers(cases.size()), progress(cases.size()), finished(cases.size()) {
    for (size_t i = 0; i < cases.size(); ++i) {
      threads.emplace_back([this, port, i, &cases] {
        answers[i] = answer_of(cases[i], http_request_streamed(port, target_of(cases[i]), json::serialize(cases[i].body),
                                                               [this, i](const std::string& raw) {
                                                                 progress[i].store(raw.size());
                                                               }));
        finished[i].store(true);
      });
    }
  }
  void join() {
    for (auto& t : threads) t.join();
  }
  // Waits until every stream has some of its text, none has finished, or the timeout.
  bool all_midway(size_t min_bytes, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (size_t i = 0; i < progress.size(); ++i) all = all && progress[i].load() >= min_bytes;
      if (all) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  int unfinished() const {
    int n = 0;
    for (const auto& f : finished) n += f.load() ? 0 : 1;
    return n;
  }
};

TEST(RestartTest, EngineKilledMidStreamResumesEveryStreamIdentically) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  TempDir shm(shm_parent());
  ChildProcess serve({hearth_bin("hearth"), "serve", "--model", model.string(), "--port", "0", "--instance", "crash",
                      "--shm-dir", shm.path().string(), "--ctx", "512", "--slots", "32", "--threads", "1"});
  const auto line = serve.read_line(60s);
  ASSERT_TRUE(line.has_value()) << serve.err();
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));

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

// A loader (published, gone), an engine and frontends started by hand.
class Processes {
 public:
  explicit Processes(const std::string& instance) : instance_(instance), shm_(shm_parent()) {}

  bool load(const std::filesystem::path& model) {
    const auto r = run_process({hearth_bin("hearth-loader"), "--model", model.string(), "--instance", instance_,
                                "--shm-dir", shm_.path().string(), "--exit-after-publish"});
    return r.exit_code == 0;
  }
  std::unique_ptr<ChildProcess> engine() {
    auto e = std::make_unique<ChildProcess>(std::vector<std::string>{hearth_bin("hearth-engine"), "--instance",
                                                                     instance_, "--shm-dir", shm_.path().string(),
                                                                     "--ctx", "512", "--slots", "32", "--threads", "1"});
    return e->read_line(30s) ? std::move(e) : nullptr;
  }
  // A frontend on a port of its own; `port` gets it.
  std::unique_ptr<ChildProcess> frontend(uint16_t& port, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {hearth_bin("hearth-frontend"), "--instance", instance_, "--shm-dir",
                                     shm_.path().string(), "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto f = std::make_unique<ChildProcess>(argv);
    const auto line = f->read_line(30s);
    if (!line) return nullptr;
    port = static_cast<uint16_t>(json::parse(*line).at("port").to_number<int>());
    return f;
  }
  const std::filesystem::path& shm() const { return shm_.path(); }

 private:
  std::string instance_;
  TempDir shm_;
};

TEST(RestartTest, AKilledFrontendLeavesTheOtherAloneAndItsSlotsComeBack) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(model);
  Processes p("twofe");
  ASSERT_TRUE(p.load(model));
  auto engine = p.engine();
  ASSERT_TRUE(engine);
  uint16_t port_a = 0, port_b = 0;
  auto a = p.frontend(port_a);
  auto b = p.frontend(port_b);
  ASSERT_TRUE(a && b);

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
  // Every slot is free again well within the stale-heartbeat bound (5 s): the dead
  // frontend's were cancelled and reclaimed by the engine.
  int64_t free = -1;
  while (std::chrono::steady_clock::now() - killed_at < 5s) {
    free = free_slots(p.shm(), "twofe");
    if (free == 32) break;
    std::this_thread::sleep_for(50ms);
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
  Processes p("noengine");
  ASSERT_TRUE(p.load(model));
  auto engine = p.engine();
  ASSERT_TRUE(engine);
  uint16_t port = 0;
  auto frontend = p.frontend(port, {"--engine-wait", "1000"});
  ASSERT_TRUE(frontend);
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
  EXPECT_GE(waited, 900ms);
  EXPECT_LT(waited, 5s);
  // A streamed request that never got a token gets a real status too.
  const auto streamed = http_request(port, "POST", "/v1/completions",
                                     R"({"prompt": "Once upon a time", "max_tokens": 8, "stream": true})");
  EXPECT_EQ(streamed.status, 503) << streamed.body;
  EXPECT_EQ(streamed.headers.count("retry-after"), 1u);
  const auto ready = http_request(port, "GET", "/ready");
  EXPECT_EQ(ready.status, 503);

  // A request waiting when the engine comes back is served, and so is everything after.
  // (The engine starts from this thread: a child's parent-death signal follows the
  // thread that started it.)
  HttpResponse resumed;
  std::thread waiting([&] { resumed = http_request(port, "POST", "/v1/completions", body); });
  std::this_thread::sleep_for(300ms);
  engine = p.engine();
  waiting.join();
  ASSERT_TRUE(engine);
  EXPECT_EQ(resumed.status, 200) << resumed.body;
  EXPECT_EQ(json::parse(resumed.body).at("choices").at(0).at("text"), json::parse(before.body).at("choices").at(0).at("text"));
  EXPECT_EQ(http_request(port, "GET", "/ready").status, 200);
}

}  // namespace
}  // namespace hearth::testing
