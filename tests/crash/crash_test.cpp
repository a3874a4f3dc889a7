// crash_test: SIGKILLs hearth's processes at their kill points (common/test_point.h),
// under load, hundreds of times, and checks that nothing was lost, duplicated, answered
// wrongly or leaked.
//
//   crash_test [--kills N] [--clients C] [--seed S] [--arm-timeout-ms T] [--loader-rounds R] [--tp 2]
//              [--spec ngram|draft]
//
// 1. Loader. hearth-loader is killed at each of its publish points in turn (at a random
//    tensor for the per-tensor point). After each kill the half-written segment must be
//    refused by a reader and by hearth-engine with a message (a READY one, killed after
//    publishing, is served), and the next loader must replace it, or adopt it when it
//    was complete.
// 2. Serving. An engine and a frontend (on a listening socket this program owns, so
//    connections wait in its queue while no frontend runs) both run armed: each starts
//    with HEARTH_KILL_POINT naming the next of its points (round robin) at a random pass
//    count, and when it dies it is started again, armed with its next point. One that
//    does not reach its point within the arm timeout is SIGKILLed by this program, at
//    whatever it was doing. Meanwhile C clients send the 16 requests of load_cases()
//    (completions and chat, streamed and not, greedy and seeded), each retried after a
//    dropped connection as a client would; every completed answer must equal its
//    reference, text and token count. A request that cannot complete within a minute is
//    lost; an answer with an error (an HTTP error status, an error event) is wrong.
//    With --tp 2 the engine is a tensor-parallel group of two processes (weights
//    published split for two ranks): rank 0 as above, and rank 1, armed in the middle of
//    its K/V stores or killed by this program at a random moment, each rank keeping its
//    share of the resident KV cache. With --spec the engine drafts tokens (speculative
//    decoding: prompt lookup, or a draft model, the model itself, published beside it),
//    so kills land between a step's drafted rows and what it kept of them; at least one
//    draft must have been kept.
// 3. Audit. With the kills over and the load stopped: every broker slot FREE, no KV block
//    in use, nothing running or waiting, the request ring empty, and one registry entry
//    held (the live frontend's). Each restarted engine adopted the resident KV cache of
//    the requests it resumed (engine/README.md): none may have failed its check (the
//    engine also rejects any block two tables claim for different content).
//
// Exits 0 when everything held, 1 otherwise, 77 (CTest: skipped) without the test model
// or without test points in this build.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include <boost/json.hpp>

#include "common/process.h"
#include "common/test_point.h"
#include "ipc/broker.h"
#include "ipc/weights_segment.h"
#include "tests/integration/instance.h"

namespace hearth::testing {
namespace {

namespace json = boost::json;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

struct Options {
  int kills = 100;
  int clients = 6;
  uint64_t seed = 1;
  int arm_timeout_ms = 3000;
  int loader_rounds = 1;
  int tp = 1;
  std::string spec;  // the engine's --spec: the kills land mid-speculation too
};

// A kill point and the most passes to let through before it fires (drawn uniformly).
// Points passed only as a process starts are armed from its first moment; the others
// after a random delay, so that the load makes progress between kills.
struct Point {
  const char* name;
  int max_passes;
  bool at_start = false;
};

// Points each process passes under this load (a point listed for a process it never
// reaches shows as "not reached" in the table).
const Point kLoaderPoints[] = {{"loader.publish.reserved", 1}, {"loader.publish.loading", 1},
                               {"loader.publish.tensor", 40},  {"loader.publish.written", 1},
                               {"loader.publish.ready", 1}};
const Point kEnginePoints[] = {
    {"broker.engine_start", 1, true},  {"ring.pop.claimed", 8},       {"engine.admit.running", 8},
    {"engine.step.planned", 60}, {"engine.step.forwarded", 60}, {"broker.publish", 200},
    {"engine.step.sampled", 60}, {"broker.finish", 8},          {"engine.reap.cancelled", 1},
    // The resident KV cache: inside a step's K/V stores, between a table's blocks and its
    // `committed`, inside a block allocation, as a filled block is offered to the prefix
    // cache's index (with a KV cache of 48 blocks, so that eviction runs too).
    {"engine.kv.store", 60},     {"engine.kv.commit", 60},      {"engine.kv.alloc", 20},
    {"engine.prefix.insert", 10},
};
// Rank 1 of a tensor-parallel group (its other deaths are this program's random kills).
const Point kRankPoints[] = {{"engine.kv.store", 60}};
const Point kFrontendPoints[] = {
    {"broker.claim.filling", 8}, {"broker.submit.queued", 8}, {"ring.push.claimed", 8}, {"broker.submit.pushed", 8},
    {"frontend.submitted", 8},   {"frontend.streamed", 30},   {"broker.release", 8},
};

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

std::string tail(const std::string& s, size_t n = 600) { return s.size() <= n ? s : s.substr(s.size() - n); }

// Kills by process and point: at the point, or by this program when the point was not
// reached in time.
struct KillTable {
  std::map<std::string, std::map<std::string, int>> at_point, timed_out;
  std::vector<std::string> unexpected;  // exits that were not a SIGKILL we caused
  int total = 0;
};

// ----------------------------------------------------------------------- loader

bool loader_phase(Instance& inst, const std::filesystem::path& model, const Options& o, std::mt19937_64& rng,
                  KillTable& kills) {
  bool ok = true;
  const auto weights = segment_path(inst.shm(), inst.name(), "weights");
  const auto log = inst.shm() / "loader-kill.log";
  std::vector<std::string> argv = {hearth_bin("hearth-loader"), "--model", model.string(), "--instance", inst.name(),
                                   "--shm-dir", inst.shm().string(), "--exit-after-publish"};
  for (int round = 0; round < o.loader_rounds; ++round) {
    for (const Point& p : kLoaderPoints) {
      // A complete segment would be adopted without publishing: start from none.
      if (auto w = weights_attach(weights); w.is_ok()) {
        std::error_code ec;
        std::filesystem::remove(weights, ec);
      }
      std::filesystem::remove(log);
      const int at = 1 + static_cast<int>(rng() % static_cast<uint64_t>(p.max_passes));
      const auto r = run_process(argv, {fmt::format("HEARTH_KILL_POINT={}:{}", p.name, at),
                                        "HEARTH_KILL_LOG=" + log.string()});
      const std::string where = read_file(log);
      ++kills.total;
      if (r.exit_code != 128 + SIGKILL || where != p.name) {
        kills.unexpected.push_back(fmt::format("hearth-loader armed at {}:{} exited {} (log \"{}\"): {}", p.name, at,
                                               r.exit_code, where, tail(r.err)));
        ok = false;
        continue;
      }
      ++kills.at_point["loader"][p.name];
      const bool complete = std::string_view(p.name) == "loader.publish.ready";
      auto attached = weights_attach(weights);
      if (attached.is_ok() != complete) {
        kills.unexpected.push_back(fmt::format("after a loader kill at {}: the segment was {}", p.name,
                                               attached.is_ok() ? "accepted" : attached.status().to_string()));
        ok = false;
      }
      if (!complete) {
        // An engine refuses the half-written segment, saying what it found.
        ChildProcess engine(inst.engine_argv({"--threads", "1"}));
        const auto code = engine.wait(20s);
        const std::string err = engine.err();
        if (code != 1 || err.find(weights.string()) == std::string::npos) {
          kills.unexpected.push_back(fmt::format("hearth-engine on a segment killed at {}: exit {}, \"{}\"", p.name,
                                                 code ? std::to_string(*code) : "none (still running)", tail(err)));
          ok = false;
        }
      }
      // The next loader repairs it: a new segment, or the complete one adopted.
      const auto again = run_process(argv);
      if (again.exit_code != 0) {
        kills.unexpected.push_back(fmt::format("hearth-loader after a kill at {}: exit {}: {}", p.name, again.exit_code,
                                               tail(again.err)));
        ok = false;
        continue;
      }
      const json::value ready = json::parse(again.out);
      if (ready.at("adopted").as_bool() != complete) {
        kills.unexpected.push_back(fmt::format("hearth-loader after a kill at {}: adopted = {}", p.name,
                                               ready.at("adopted").as_bool()));
        ok = false;
      }
    }
  }
  return ok;
}

// ----------------------------------------------------------------------- load

struct LoadResult {
  int requests = 0;     // answers checked
  int attempts = 0;     // HTTP requests sent
  int cut = 0;          // attempts whose connection broke (a frontend died): retried
  int lost = 0;         // requests that never completed
  int wrong = 0;        // answers that differ from the reference, or errors
  std::vector<std::string> failures;
};

class Load {
 public:
  Load(uint16_t port, std::vector<Case> cases, std::vector<Answer> refs, int clients)
      : port_(port), cases_(std::move(cases)), refs_(std::move(refs)) {
    for (int t = 0; t < clients; ++t) threads_.emplace_back([this, t] { client(t); });
  }
  ~Load() { finish(); }
  LoadResult finish() {
    stop_.store(true);
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
    std::lock_guard lock(mutex_);
    return result_;
  }
  int completed() {
    std::lock_guard lock(mutex_);
    return result_.requests;
  }

 private:
  void client(int t) {
    for (size_t n = static_cast<size_t>(t) * 5; !stop_.load(); ++n) {
      const size_t k = n % cases_.size();
      const Case& c = cases_[k];
      const std::string body = json::serialize(c.body);
      const auto deadline = Clock::now() + 60s;
      int attempts = 0, cut = 0;
      std::string outcome = "lost";  // until an answer comes
      Answer last;
      while (Clock::now() < deadline) {
        ++attempts;
        const HttpResponse r = http_request_streamed(port_, target_of(c), body);
        last = answer_of(c, r);
        const bool broken = r.status == 0 || last.error.starts_with("the stream did not end");
        if (last.error.empty()) {
          const Answer& want = refs_[k];
          outcome = last.text == want.text && last.completion_tokens == want.completion_tokens ? "ok" : "wrong";
          break;
        }
        if (!broken) {
          outcome = "error";
          break;
        }
        ++cut;
        std::this_thread::sleep_for(5ms);  // a client's pause before it retries
      }
      std::lock_guard lock(mutex_);
      ++result_.requests;
      result_.attempts += attempts;
      result_.cut += cut;
      if (outcome == "ok") continue;
      if (outcome == "lost") ++result_.lost;
      if (outcome != "lost") ++result_.wrong;
      if (result_.failures.size() < 10) {
        result_.failures.push_back(fmt::format("case {} {}: got \"{}\" ({} tokens){} ; want \"{}\" ({} tokens)", k,
                                               outcome, tail(last.text, 200), last.completion_tokens,
                                               last.error.empty() ? "" : " error " + tail(last.error, 300),
                                               tail(refs_[k].text, 200), refs_[k].completion_tokens));
      }
    }
  }

  uint16_t port_;
  std::vector<Case> cases_;
  std::vector<Answer> refs_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  LoadResult result_;
  std::vector<std::thread> threads_;
};

// ----------------------------------------------------------------------- serving

// One of the two serving processes, restarted armed each time it dies.
class Armed {
 public:
  Armed(std::string role, std::vector<std::string> argv, std::vector<Point> points, int pass_fd,
        std::filesystem::path dir)
      : role_(std::move(role)), argv_(std::move(argv)), points_(std::move(points)), pass_fd_(pass_fd),
        dir_(std::move(dir)) {}

  void start(std::mt19937_64* rng) {
    Environment env;
    point_.clear();
    log_ = dir_ / fmt::format("{}-kill-{}.log", role_, starts_++);
    if (rng != nullptr) {
      const Point& p = points_[next_++ % points_.size()];
      point_ = p.name;
      at_ = 1 + static_cast<int>((*rng)() % static_cast<uint64_t>(p.max_passes));
      const int after_ms = p.at_start ? 0 : static_cast<int>((*rng)() % 400);
      env = {fmt::format("HEARTH_KILL_POINT={}:{}", p.name, at_), "HEARTH_KILL_LOG=" + log_.string(),
             fmt::format("HEARTH_KILL_AFTER_MS={}", after_ms)};
    }
    std::vector<int> fds;
    if (pass_fd_ >= 0) fds.push_back(pass_fd_);
    child_ = std::make_unique<ChildProcess>(argv_, env, fds);
    started_ = Clock::now();
    killed_by_us_ = false;
  }

  // Handles a death or an expired arm; returns true when the process died (and was
  // recorded), so the caller starts it again.
  bool check(KillTable& kills, std::chrono::milliseconds arm_timeout) {
    const auto code = child_->wait(0ms);
    if (!code) {
      if (!point_.empty() && !killed_by_us_ && Clock::now() - started_ > arm_timeout) {
        child_->signal(SIGKILL);
        killed_by_us_ = true;
      }
      return false;
    }
    const std::string where = read_file(log_);
    if (*code == 128 + SIGKILL && !where.empty()) {
      ++kills.at_point[role_][where];
      ++kills.total;
    } else if (*code == 128 + SIGKILL && killed_by_us_) {
      ++kills.timed_out[role_][point_];
      ++kills.total;
    } else {
      kills.unexpected.push_back(fmt::format("{} (armed at \"{}\":{}) exited {}: {}", role_, point_, at_, *code,
                                             tail(child_->err())));
    }
    return true;
  }

  // Ends this run without counting it (references done, or the kills are over) and
  // starts it again unarmed; a death before that is recorded first.
  void disarm(KillTable& kills, std::chrono::milliseconds arm_timeout) {
    if (!check(kills, arm_timeout)) {
      child_->signal(SIGKILL);
      child_->wait(10s);
    }
    start(nullptr);
  }
  std::optional<std::string> read_line() { return child_->read_line(60s); }
  void stop_uncounted() {
    child_->signal(SIGKILL);
    child_->wait(10s);
  }
  pid_t pid() const { return child_->pid(); }
  bool alive() { return !child_->wait(0ms).has_value(); }
  std::string err() const { return child_->err(); }

 private:
  std::string role_;
  std::vector<std::string> argv_;
  std::vector<Point> points_;
  int pass_fd_;
  std::filesystem::path dir_;
  std::unique_ptr<ChildProcess> child_;
  std::filesystem::path log_;
  std::string point_;
  int at_ = 0;
  size_t next_ = 0;
  int starts_ = 0;
  Clock::time_point started_;
  bool killed_by_us_ = false;
};

struct Audit {
  uint32_t busy_slots = 0, running = 0, waiting = 0, kv_blocks = 0;
  uint64_t kv_adopted = 0, kv_rejected = 0;  // resumed sequences that adopted the resident cache, failed its check
  uint64_t spec_drafted = 0, spec_kept = 0;   // speculative decoding's drafted tokens, and those kept
  uint64_t ring = 0;
  int live_entries = 0, dead_entries = 0;
  std::map<std::string, int> states;
  bool clean() const {
    return busy_slots == 0 && running == 0 && waiting == 0 && kv_blocks == 0 && ring == 0 && live_entries == 1;
  }
};

Audit audit_once(const Broker& b) {
  Audit a;
  for (uint32_t i = 0; i < b.n_slots(); ++i) {
    const uint32_t s = b.slot(i).state.load(std::memory_order_acquire);
    ++a.states[std::string(slot_state_name(s))];
    if (s != static_cast<uint32_t>(SlotState::kFree)) ++a.busy_slots;
  }
  const BrokerHeader& h = b.header();
  a.running = h.stat_running.load();
  a.waiting = h.stat_waiting.load();
  a.kv_blocks = h.stat_kv_blocks_used.load();
  a.kv_adopted = h.stat_kv_adopted.load();
  a.kv_rejected = h.stat_kv_adopt_rejected.load();
  a.spec_drafted = h.stat_spec_draft_tokens.load();
  a.spec_kept = h.stat_spec_accepted.load();
  a.ring = b.ring().size();
  for (const FrontendEntry& f : h.frontends) {
    const int32_t pid = f.pid.load();
    if (pid == 0) continue;
    (process_alive(pid, f.start_time.load()) ? a.live_entries : a.dead_entries) += 1;
  }
  return a;
}

int run(const Options& o) {
  const auto model = shared_path("models/stories260K/stories260K.gguf");
  if (!std::filesystem::exists(model)) {
    std::printf("crash_test: skipped: %s is absent (set HEARTH_SHARED to the folder holding models/)\n",
                model.string().c_str());
    return 77;
  }
  if (!test_points_compiled()) {
    std::printf("crash_test: skipped: this build has no test points (configure with -DHEARTH_TEST_POINTS=ON)\n");
    return 77;
  }
  const auto t0 = Clock::now();
  std::mt19937_64 rng(o.seed);
  Instance inst("crash");
  KillTable kills;
  bool ok = loader_phase(inst, model, o, rng, kills);
  const double loader_s = std::chrono::duration<double>(Clock::now() - t0).count();

  uint16_t port = 0;
  const int listen_fd = listen_socket(port);
  if (listen_fd < 0) {
    std::printf("crash_test: cannot listen on 127.0.0.1\n");
    return 1;
  }
  std::vector<Point> engine_points(std::begin(kEnginePoints), std::end(kEnginePoints));
  std::vector<Point> frontend_points(std::begin(kFrontendPoints), std::end(kFrontendPoints));
  std::vector<Point> rank_points(std::begin(kRankPoints), std::end(kRankPoints));
  std::vector<std::string> engine_flags = {"--slots", "64", "--ctx", "256", "--threads", "1", "--kv-blocks", "48"};
  std::vector<std::string> rank1_flags = engine_flags;
  if (o.tp > 1 || o.spec == "draft") {
    // The loader phase published unsplit weights: publish them for two ranks, and the
    // draft model (the model itself) for --spec draft.
    std::vector<std::string> argv = {hearth_bin("hearth-loader"), "--model", model.string(), "--instance", inst.name(),
                                     "--shm-dir", inst.shm().string(), "--tp", std::to_string(o.tp), "--exit-after-publish"};
    if (o.spec == "draft") argv.insert(argv.end(), {"--draft-model", model.string()});
    const auto r = run_process(argv);
    if (r.exit_code != 0) {
      std::printf("crash_test: hearth-loader %s failed: %s\n", o.tp > 1 ? "--tp 2" : "--draft-model", tail(r.err).c_str());
      return 1;
    }
  }
  if (o.tp > 1) {
    engine_flags.insert(engine_flags.end(), {"--tp", "2", "--rank", "0"});
    rank1_flags.insert(rank1_flags.end(), {"--tp", "2", "--rank", "1"});
  }
  if (!o.spec.empty()) engine_flags.insert(engine_flags.end(), {"--spec", o.spec, "--spec-tokens", "4"});
  Armed engine("engine", inst.engine_argv(engine_flags), engine_points, -1, inst.shm());
  Armed rank1("rank1", inst.engine_argv(rank1_flags), rank_points, -1, inst.shm());
  Armed frontend("frontend", inst.frontend_argv({"--threads", "2", "--engine-wait", "60000"}, true), frontend_points,
                 listen_fd, inst.shm());
  // References first, from processes nobody kills. The engine creates the broker the
  // frontend attaches to (rank 0 is ready once rank 1 has joined its group).
  if (o.tp > 1) rank1.start(nullptr);
  engine.start(nullptr);
  engine.read_line();
  frontend.start(nullptr);
  const auto cases = load_cases();
  std::vector<Answer> refs;
  bool ready = false;
  for (auto deadline = Clock::now() + 60s; !ready && Clock::now() < deadline;) {
    if (!engine.alive() || !frontend.alive()) break;
    ready = http_request(port, "GET", "/ready").status == 200;
    if (!ready) std::this_thread::sleep_for(20ms);
  }
  if (!ready) {
    std::printf("crash_test: the instance did not come up\nengine: %s\nfrontend: %s\n", tail(engine.err()).c_str(),
                tail(frontend.err()).c_str());
    return 1;
  }
  refs = references(port, cases);
  const double refs_s = std::chrono::duration<double>(Clock::now() - t0).count() - loader_s;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!refs[i].error.empty() || refs[i].completion_tokens <= 0) {
      std::printf("crash_test: reference %zu failed: %s\n%s\n%s\n", i, refs[i].error.c_str(), tail(engine.err()).c_str(),
                  tail(frontend.err()).c_str());
      return 1;
    }
  }
  const auto serve_t0 = Clock::now();
  const int loader_kills = kills.total;
  const auto arm_timeout = std::chrono::milliseconds(o.arm_timeout_ms);
  // The unarmed pair is replaced by armed ones (not counted as kills).
  engine.stop_uncounted();
  frontend.stop_uncounted();
  if (o.tp > 1) {
    rank1.stop_uncounted();
    rank1.start(&rng);
  }
  engine.start(&rng);
  frontend.start(&rng);
  Load load(port, cases, refs, o.clients);
  while (kills.total - loader_kills < o.kills) {
    if (engine.check(kills, arm_timeout)) engine.start(&rng);
    if (o.tp > 1 && rank1.check(kills, arm_timeout)) rank1.start(&rng);
    if (frontend.check(kills, arm_timeout)) frontend.start(&rng);
    std::this_thread::sleep_for(2ms);
  }
  // Kills over: all run unarmed while the load winds down.
  engine.disarm(kills, arm_timeout);
  if (o.tp > 1) rank1.disarm(kills, arm_timeout);
  frontend.disarm(kills, arm_timeout);
  const LoadResult load_result = load.finish();
  const double serve_s = std::chrono::duration<double>(Clock::now() - serve_t0).count();

  // Audit: the engine sweeps every 200 ms, skips a stalled ring head after 2 s.
  const auto audit_t0 = Clock::now();
  Audit audit;
  auto broker = Broker::attach(segment_path(inst.shm(), inst.name(), "broker"));
  if (!broker.is_ok()) {
    std::printf("crash_test: %s\n", broker.status().to_string().c_str());
    return 1;
  }
  for (auto deadline = Clock::now() + 15s; Clock::now() < deadline;) {
    audit = audit_once(*broker);
    if (audit.clean()) break;
    std::this_thread::sleep_for(50ms);
  }
  if (!engine.alive() || !frontend.alive() || (o.tp > 1 && !rank1.alive())) {
    kills.unexpected.push_back("after the kills: engine " + std::string(engine.alive() ? "up" : "down") +
                               (o.tp > 1 ? std::string(", rank 1 ") + (rank1.alive() ? "up" : "down") : "") +
                               ", frontend " + (frontend.alive() ? "up" : "down") + "\n" + tail(engine.err()) +
                               (o.tp > 1 ? tail(rank1.err()) : "") + tail(frontend.err()));
  }

  // The table.
  std::printf("\ncrash_test: %d kills (%d loader, %d serving) in %.1f s; seed %llu, %d clients, tp %d\n",
              kills.total, loader_kills, kills.total - loader_kills,
              std::chrono::duration<double>(Clock::now() - t0).count(), static_cast<unsigned long long>(o.seed),
              o.clients, o.tp);
  std::printf("\n| process | kill point | killed there | killed by the driver (not reached in %d ms) |\n",
              o.arm_timeout_ms);
  std::printf("| --- | --- | ---: | ---: |\n");
  std::vector<std::string> not_reached;
  auto rows = [&](const char* role, auto& points) {
    for (const Point& p : points) {
      const int here = kills.at_point[role][p.name], timer = kills.timed_out[role][p.name];
      std::printf("| %s | %s | %d | %d |\n", role, p.name, here, timer);
      if (here == 0) not_reached.push_back(std::string(role) + " " + p.name);
    }
  };
  rows("loader", kLoaderPoints);
  rows("engine", kEnginePoints);
  if (o.tp > 1) rows("rank1", kRankPoints);
  rows("frontend", kFrontendPoints);
  std::printf("\nrequests checked %d (attempts %d, %d cut by a frontend kill and retried): lost %d, wrong %d\n",
              load_result.requests, load_result.attempts, load_result.cut, load_result.lost, load_result.wrong);
  std::string states;
  for (const auto& [name, n] : audit.states) states += fmt::format(" {} {}", name, n);
  std::printf("after recovery: slots%s; running %u, waiting %u, KV blocks in use %u, ring entries %llu; registry "
              "entries live %d, of dead frontends %d (reused by the next ones)\n",
              states.c_str(), audit.running, audit.waiting, audit.kv_blocks,
              static_cast<unsigned long long>(audit.ring), audit.live_entries, audit.dead_entries);
  // A failed check means an adopted cache was not what its table said (or two tables
  // claimed one block for different content): never expected, whatever the kill point.
  std::printf("resumed sequences that adopted the resident KV cache %llu, rejected by its check %llu\n",
              static_cast<unsigned long long>(audit.kv_adopted), static_cast<unsigned long long>(audit.kv_rejected));
  if (!o.spec.empty()) {
    std::printf("speculative decoding (%s): %llu drafted tokens, %llu kept\n", o.spec.c_str(),
                static_cast<unsigned long long>(audit.spec_drafted), static_cast<unsigned long long>(audit.spec_kept));
  }
  std::printf("phases: loader %.1f s, references %.1f s, serving under kills %.1f s, recovery until clean %.1f s\n",
              loader_s, refs_s, serve_s, std::chrono::duration<double>(Clock::now() - audit_t0).count());
  for (const auto& f : load_result.failures) std::printf("FAILED request: %s\n", f.c_str());
  for (const auto& u : kills.unexpected) std::printf("FAILED: %s\n", u.c_str());
  for (const auto& n : not_reached) std::printf("NOT REACHED: %s\n", n.c_str());
  ok = ok && kills.unexpected.empty() && load_result.lost == 0 && load_result.wrong == 0 && audit.clean() &&
       not_reached.empty() && load_result.requests > 0 && audit.kv_rejected == 0 &&
       (o.spec.empty() || audit.spec_kept > 0);
  std::printf("%s\n", ok ? "crash_test: passed" : "crash_test: FAILED");
  ::close(listen_fd);
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace hearth::testing

int main(int argc, char** argv) {
  hearth::testing::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> long long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "crash_test: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atoll(argv[++i]);
    };
    if (a == "--kills") {
      o.kills = static_cast<int>(value());
    } else if (a == "--clients") {
      o.clients = static_cast<int>(value());
    } else if (a == "--seed") {
      o.seed = static_cast<uint64_t>(value());
    } else if (a == "--arm-timeout-ms") {
      o.arm_timeout_ms = static_cast<int>(value());
    } else if (a == "--loader-rounds") {
      o.loader_rounds = static_cast<int>(value());
    } else if (a == "--tp") {
      o.tp = static_cast<int>(value());
      if (o.tp != 1 && o.tp != 2) {
        std::fprintf(stderr, "crash_test: --tp is 1 or 2\n");
        return 2;
      }
    } else if (a == "--spec" && i + 1 < argc) {
      o.spec = argv[++i];
    } else {
      std::fprintf(stderr, "usage: crash_test [--kills N] [--clients C] [--seed S] [--arm-timeout-ms T] "
                           "[--loader-rounds R] [--tp 2] [--spec ngram|draft]\n");
      return 2;
    }
  }
  return hearth::testing::run(o);
}
