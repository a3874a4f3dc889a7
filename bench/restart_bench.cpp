// restart_bench: the latency a restart adds under load. `hearth serve` runs a model while
// N clients keep requests in flight over HTTP, in three phases of equal length: steady,
// the frontend replaced (SIGHUP) every couple of seconds, and the engine killed with
// SIGKILL (serve starts another, which resumes the requests) every few seconds. Prints
// p50/p99/max request latency per phase, the same for the requests that were in flight
// at a restart, and what a restart added over steady.
//
//   restart_bench [--model PATH] [--clients 32] [--seconds 10] [--max-tokens 32]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "common/args.h"
#include "common/process.h"
#include "common/subprocess.h"
#include "kernels/cpu/isa.h"
#include "tests/integration/http_client.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

using hearth::bench::bin;

struct Request {
  Clock::time_point start, end;
  bool ok = false;
};

struct Figures {
  size_t n = 0, failed = 0;
  double p50 = 0, p99 = 0, max = 0;
};

Figures figures(const std::vector<Request>& rs) {
  Figures f;
  std::vector<double> ms;
  for (const Request& r : rs) {
    ++f.n;
    if (!r.ok) {
      ++f.failed;
      continue;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(r.end - r.start).count());
  }
  if (ms.empty()) return f;
  std::sort(ms.begin(), ms.end());
  f.p50 = ms[ms.size() / 2];
  f.p99 = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  f.max = ms.back();
  return f;
}

// Runs `clients` closed-loop clients for `length`, calling `disrupt` every `period`
// (never when period is zero). Returns every request and the disruption times.
std::pair<std::vector<Request>, std::vector<Clock::time_point>> phase(uint16_t port, int clients, int max_tokens,
                                                                      std::chrono::seconds length,
                                                                      std::chrono::milliseconds period,
                                                                      const std::function<void()>& disrupt) {
  std::vector<Request> all;
  std::mutex mutex;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to", "One day, a bird"};
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      for (int n = 0; !stop.load(); ++n) {
        const std::string body = std::string("{\"prompt\": \"") + prompts[(c + n) % 4] +
                                 "\", \"temperature\": 0, \"ignore_eos\": true, \"max_tokens\": " +
                                 std::to_string(max_tokens) + "}";
        Request r;
        r.start = Clock::now();
        const auto res = hearth::testing::http_request_streamed(port, "/v1/completions", body);
        r.end = Clock::now();
        r.ok = res.status == 200;
        std::lock_guard lock(mutex);
        all.push_back(r);
      }
    });
  }
  std::vector<Clock::time_point> events;
  const auto begin = Clock::now();
  if (period.count() > 0) {
    for (auto next = begin + period; next + period / 2 < begin + length; next += period) {
      std::this_thread::sleep_until(next);
      events.push_back(Clock::now());
      disrupt();
    }
  }
  std::this_thread::sleep_until(begin + length);
  stop.store(true);
  for (auto& t : threads) t.join();
  return {all, events};
}

// The requests that were in flight at one of `events`.
std::vector<Request> in_flight_at(const std::vector<Request>& rs, const std::vector<Clock::time_point>& events) {
  std::vector<Request> out;
  for (const Request& r : rs) {
    for (const auto& e : events) {
      if (r.start <= e && e <= r.end) {
        out.push_back(r);
        break;
      }
    }
  }
  return out;
}

void row(const char* name, const Figures& f, const Figures& steady) {
  std::printf("| %-32s | %7zu | %6zu | %8.1f | %8.1f | %8.1f | %+9.1f | %+9.1f |\n", name, f.n, f.failed, f.p50, f.p99,
              f.max, f.p50 - steady.p50, f.p99 - steady.p99);
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"model", "clients", "seconds", "max-tokens"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "restart_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  const std::filesystem::path exe_dir = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  const std::string model =
      args->get("model").value_or((exe_dir / "../../../shared/models/stories260K/stories260K.gguf").lexically_normal());
  const int clients = static_cast<int>(args->get_int("clients", 1, 1024)->value_or(32));
  const auto seconds = std::chrono::seconds(args->get_int("seconds", 3, 3600)->value_or(10));
  const int max_tokens = static_cast<int>(args->get_int("max-tokens", 1, 4000)->value_or(32));
  if (!std::filesystem::exists(model)) {
    std::fprintf(stderr, "restart_bench: no model at %s (give --model)\n", model.c_str());
    return 1;
  }
  const std::string shm = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  hearth::ChildProcess serve({bin("hearth"), "serve", "--model", model, "--port", "0", "--instance", "bench-restart",
                              "--shm-dir", shm, "--slots", std::to_string(std::max(64, clients * 2))});
  const auto line = serve.read_line(120s);
  if (!line) {
    std::fprintf(stderr, "restart_bench: hearth serve did not start: %s\n", serve.err().c_str());
    return 1;
  }
  const size_t colon = line->rfind(':', line->find("/v1"));
  const auto port = static_cast<uint16_t>(std::stoi(line->substr(colon + 1)));

  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("# restarts under load: %s, %d clients, %d tokens per request, %lld s per phase\n",
              std::filesystem::path(model).filename().c_str(), clients, max_tokens,
              static_cast<long long>(seconds.count()));
  const auto steady = phase(port, clients, max_tokens, seconds, 0ms, [] {});
  const auto frontend = phase(port, clients, max_tokens, seconds, 2000ms, [&serve] { serve.signal(SIGHUP); });
  const auto engine = phase(port, clients, max_tokens, seconds, 3000ms, [&serve] {
    for (int pid : hearth::children_of(serve.pid(), "hearth-engine")) ::kill(pid, SIGKILL);
  });
  const Figures base = figures(steady.first);
  std::printf("| %-32s | %7s | %6s | %8s | %8s | %8s | %9s | %9s |\n", "phase", "requests", "failed", "p50 ms",
              "p99 ms", "max ms", "+p50 ms", "+p99 ms");
  std::printf("| :--- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  row("steady", base, base);
  row(("frontend replaced x" + std::to_string(frontend.second.size())).c_str(), figures(frontend.first), base);
  row("  in flight at a replacement", figures(in_flight_at(frontend.first, frontend.second)), base);
  row(("engine killed x" + std::to_string(engine.second.size())).c_str(), figures(engine.first), base);
  row("  in flight at a kill", figures(in_flight_at(engine.first, engine.second)), base);
  serve.signal(SIGTERM);
  serve.wait(60s);
  return 0;
}
