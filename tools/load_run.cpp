#include "tools/load_run.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <random>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace hearth::cli {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// What the level's coroutines share.
struct LevelState {
  const Endpoint& endpoint;
  Workload& workload;
  const LoadOptions& options;
  const std::function<void(const RequestRecord&)>& on_record;
  Clock::time_point start;
  Clock::time_point deadline;
  std::mutex mu;
  std::vector<RequestRecord> records;  // guarded by mu
  std::atomic<size_t> in_flight{0};
  std::atomic<size_t> peak_in_flight{0};
  size_t dropped = 0;  // written by the one arrivals coroutine
  std::exception_ptr failure;  // guarded by mu: the first exception a coroutine let escape

  void begin() {
    const size_t n = in_flight.fetch_add(1) + 1;
    size_t peak = peak_in_flight.load();
    while (n > peak && !peak_in_flight.compare_exchange_weak(peak, n)) {
    }
  }
  // A coroutine's completion handler: an exception (a bug, or memory) stops the level,
  // and run_level() rethrows it once every thread has left the io_context.
  auto on_exit(asio::io_context& ioc) {
    return [this, &ioc](std::exception_ptr e) {
      if (!e) return;
      {
        std::lock_guard lock(mu);
        if (!failure) failure = e;
      }
      ioc.stop();
    };
  }
  void end(RequestRecord record) {
    in_flight.fetch_sub(1);
    std::lock_guard lock(mu);
    if (on_record) on_record(record);
    records.push_back(std::move(record));
  }
};

// A closed-loop user: one connection, one request after another until the deadline.
// After a failure the user waits kRetryPause before the next request, as a client
// would: a refusing or absent server is not hammered in a tight loop.
constexpr auto kRetryPause = std::chrono::milliseconds(50);

asio::awaitable<void> user(LevelState& s) {
  auto executor = co_await asio::this_coro::executor;
  LoadConnection connection(executor, s.endpoint);
  asio::steady_timer pause(executor);
  while (Clock::now() < s.deadline) {
    const std::string& body = s.workload.next_body();
    s.begin();
    RequestRecord r = co_await connection.post_stream(s.workload.target, body, s.start, s.options.timeout);
    const bool failed = !r.ok();
    s.end(std::move(r));
    if (failed) {
      pause.expires_after(kRetryPause);
      co_await pause.async_wait(asio::use_awaitable);
    }
  }
}

// One open-loop request on its own connection.
asio::awaitable<void> one_request(LevelState& s, const std::string& body) {
  LoadConnection connection(co_await asio::this_coro::executor, s.endpoint);
  RequestRecord r = co_await connection.post_stream(s.workload.target, body, s.start, s.options.timeout);
  s.end(std::move(r));
}

// Poisson arrivals at `rate` per second until the deadline. Each request runs on its own
// strand, so with --threads > 1 no connection is touched by two threads at once.
asio::awaitable<void> arrivals(LevelState& s, asio::io_context& ioc, double rate, uint64_t seed) {
  auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  auto at = s.start;
  for (;;) {
    at += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
    if (at >= s.deadline) break;
    timer.expires_at(at);
    co_await timer.async_wait(asio::use_awaitable);
    if (s.in_flight.load() >= s.options.max_in_flight) {
      ++s.dropped;
      continue;
    }
    s.begin();
    asio::co_spawn(asio::make_strand(ioc), one_request(s, s.workload.next_body()), s.on_exit(ioc));
  }
}

}  // namespace

LevelRun run_level(const Endpoint& endpoint, Workload& workload, const LoadLevel& level, const LoadOptions& options,
                   const std::function<void(const RequestRecord&)>& on_record) {
  // The state outlives the io_context, whose destructor ends any coroutine a stop left.
  LevelState s{endpoint, workload, options, on_record, {}, {}};
  asio::io_context ioc(std::max(1, options.threads));
  s.start = Clock::now();
  s.deadline = s.start + options.duration;
  // A strand per user (and per open-loop request): a connection and its coroutine's
  // locals are only ever touched by one thread at a time, whatever --threads is.
  if (level.kind == LoadLevel::Kind::kUsers) {
    const int users = std::max(1, static_cast<int>(level.value));
    for (int u = 0; u < users; ++u) asio::co_spawn(asio::make_strand(ioc), user(s), s.on_exit(ioc));
  } else {
    asio::co_spawn(asio::make_strand(ioc), arrivals(s, ioc, level.value, options.seed), s.on_exit(ioc));
  }
  std::vector<std::thread> threads;
  for (int t = 1; t < options.threads; ++t) threads.emplace_back([&ioc] { ioc.run(); });
  ioc.run();
  for (std::thread& t : threads) t.join();
  if (s.failure) std::rethrow_exception(s.failure);

  LevelRun run;
  run.level = level;
  run.wall_s = std::chrono::duration<double>(Clock::now() - s.start).count();
  run.records = std::move(s.records);
  run.peak_in_flight = s.peak_in_flight.load();
  run.dropped = s.dropped;
  return run;
}

}  // namespace hearth::cli
