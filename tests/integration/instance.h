// One hearth instance started process by process for the multi-process tests: the
// weights published by hearth-loader (which then exits), and hearth-engine and
// hearth-frontend children with the flags and environment a test wants. Also the load
// those tests send (requests of every kind with the answer each must give) and small
// readers of /metrics and `hearth status`.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "tests/integration/hearth_bin.h"
#include "tests/integration/http_client.h"
#include "tests/test_util.h"

namespace hearth::testing {

// /dev/shm when writable (segments live there in production), else the temp directory.
std::filesystem::path shm_parent();

// A TCP port nobody listens on at the moment of the call.
uint16_t free_port();

// A listening TCP socket on 127.0.0.1 (port 0: any); -1 on failure. `port` gets its port.
int listen_socket(uint16_t& port);

// The value of a sample in a Prometheus text body (summed over its label sets: `name` and
// `name{...}` lines), or nullopt when there is none.
std::optional<double> metric_value(const std::string& metrics, const std::string& name);
// The value of `name` in the /metrics of the frontend at `port`; -1 when it is not there.
inline double metric_at(uint16_t port, const std::string& name) {
  return metric_value(http_request(port, "GET", "/metrics").body, name).value_or(-1);
}

// `hearth status --json` for one instance, by segment ("broker", "weights"); empty on failure.
boost::json::object status_of(const std::filesystem::path& shm, const std::string& instance);

class Instance {
 public:
  // Segments go to a fresh directory under shm_parent().
  explicit Instance(std::string name);

  const std::string& name() const { return name_; }
  const std::filesystem::path& shm() const { return shm_.path(); }

  // Publishes `model` with hearth-loader --exit-after-publish; "" on success, else what
  // the loader said.
  std::string load(const std::filesystem::path& model, const std::vector<std::string>& extra = {});

  // hearth-engine with `--instance --shm-dir` and `extra` flags, waited for until it says
  // it is ready. On failure: nullptr, and `failure` (when given) gets its stderr.
  std::unique_ptr<ChildProcess> engine(const std::vector<std::string>& extra = {}, const Environment& env = {},
                                       std::string* failure = nullptr);
  // hearth-frontend on a port of its own (or on `pass_fd` with --listen-fd 3), waited for
  // until it listens; `port` gets the port it reported.
  std::unique_ptr<ChildProcess> frontend(uint16_t& port, const std::vector<std::string>& extra = {},
                                         const Environment& env = {}, std::string* failure = nullptr,
                                         int pass_fd = -1);

  std::vector<std::string> engine_argv(const std::vector<std::string>& extra) const;
  std::vector<std::string> frontend_argv(const std::vector<std::string>& extra, bool listen_fd) const;

 private:
  std::string name_;
  TempDir shm_;
};

// Requests the load tests send, and how their answers are checked.
struct Case {
  bool chat = false;
  bool stream = false;
  boost::json::object body;
};
std::string target_of(const Case& c);

// The generated text of a complete, successful response (with its completion token
// count when the response carried usage, else -1), or an error saying what was wrong.
struct Answer {
  std::string text;
  int completion_tokens = -1;
  std::string error;
};
Answer answer_of(const Case& c, const HttpResponse& r);

// Sixteen requests: completions and chat, streamed and not, greedy and seeded sampling
// (a seed makes an answer as reproducible as greedy), several prompts and lengths.
std::vector<Case> load_cases();
// Greedy streams long enough to be cut by a kill (`max_tokens` `tokens` and more).
std::vector<Case> long_streams(int n, int tokens = 300);

// Each case's answer, asked once and not streamed; adds a failure for any error.
std::vector<Answer> references(uint16_t port, const std::vector<Case>& cases);

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
        answers[i] = answer_of(cases[i], http_request_streamed(port, target_of(cases[i]), boost::json::serialize(cases[i].body),
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
  // Waits for every stream: their texts, "" (and a test failure) for one that failed.
  std::vector<std::string> texts() {
    join();
    std::vector<std::string> out;
    for (const Answer& a : answers) {
      EXPECT_EQ(a.error, "");
      out.push_back(a.error.empty() ? a.text : "");
    }
    return out;
  }
  // Waits until every stream has some of its text, none has finished, or the timeout.
  bool all_midway(size_t min_bytes, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (size_t i = 0; i < progress.size(); ++i) all = all && progress[i].load() >= min_bytes;
      if (all) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }
  int unfinished() const {
    int n = 0;
    for (const auto& f : finished) n += f.load() ? 0 : 1;
    return n;
  }
};

}  // namespace hearth::testing
