// One load level of `hearth bench`: closed-loop users (each sends its next request when
// the last one ended, as Locust's users do, or 50 ms after it failed) or open-loop Poisson arrivals at a set rate
// (requests start whether or not earlier ones ended, as real traffic does). All the
// level's connections run on one io_context with a few threads.
//
// run_level() blocks until every request it started has ended; it is not reentrant on
// one Workload only because the prompt counter is shared (use one run at a time).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tools/load_client.h"

namespace hearth::cli {

// The requests: bodies[i] for the i-th request of the run (cycling), all POSTed to
// `target` (e.g. "/v1/completions"). Bodies are complete JSON with "stream": true.
struct Workload {
  std::string target;
  std::vector<std::string> bodies;
  std::atomic<uint64_t> next{0};  // the run's request counter, over every level

  const std::string& next_body() { return bodies[next.fetch_add(1) % bodies.size()]; }
};

struct LoadLevel {
  enum class Kind { kUsers, kRate };
  Kind kind = Kind::kUsers;
  double value = 1;  // users (a whole number), or arrivals per second
};

struct LoadOptions {
  std::chrono::milliseconds duration{20000};  // requests start within it; all are awaited
  std::chrono::milliseconds timeout{300000};  // per request, connect to [DONE]
  int threads = 1;                            // io_context threads
  uint64_t seed = 1;                          // Poisson arrivals
  size_t max_in_flight = 4096;                // open loop: arrivals beyond it are dropped and counted
};

struct LevelRun {
  LoadLevel level;
  std::vector<RequestRecord> records;  // in order of ending
  double wall_s = 0;                   // from the level's start to its last request's end
  size_t peak_in_flight = 0;
  size_t dropped = 0;  // open loop: arrivals not sent because max_in_flight were running
};

// Runs one level against the endpoint (resolved). `on_record`, when given, sees each
// record as it ends (from an io thread, one at a time).
LevelRun run_level(const Endpoint& endpoint, Workload& workload, const LoadLevel& level, const LoadOptions& options,
                   const std::function<void(const RequestRecord&)>& on_record = {});

}  // namespace hearth::cli
