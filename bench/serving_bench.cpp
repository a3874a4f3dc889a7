// Continuous batching against static batching, on a real hearth-engine process: time to
// first token, tokens/s over the whole run (prefill included) and aggregate decode
// tokens/s (while every stream is decoding: all have their first token, none has
// ended) at 1, 4, 16 and 64 concurrent streams.
// Requests go in through the broker, as hearth-frontend sends them (HTTP parsing and
// JSON are not part of the figures). Static batching waits for a full batch (the
// engine's max batch size) or 100 ms, then runs that batch to its end.
// Usage: serving_bench [--model GGUF] [--prompt-tokens N] [--max-tokens N] [--streams 1,4,16,64]
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/args.h"
#include "common/process.h"
#include "common/subprocess.h"
#include "ipc/broker_client.h"
#include "ipc/segment.h"
#include "kernels/cpu/isa.h"

namespace {

using namespace std::chrono_literals;

struct Figures {
  double ttft_p50_ms = 0, ttft_max_ms = 0, tokens_per_s = 0;
  double decode_tokens_per_s = 0;  // tokens/s while every stream is decoding (all have their first token, none done)
};

Figures run_streams(hearth::BrokerClient& client, int streams, int prompt_tokens, int max_tokens, int vocab) {
  std::vector<uint32_t> slots;
  std::vector<uint64_t> submitted;
  const uint64_t start = hearth::monotonic_ns();
  for (int s = 0; s < streams; ++s) {
    hearth::SubmitRequest r;
    r.prompt.push_back(1);
    for (int i = 1; i < prompt_tokens; ++i) r.prompt.push_back(3 + (i * 7919 + s * 131) % (vocab - 3));
    r.spec.sampling.temperature = 0.0f;
    r.spec.max_tokens = max_tokens;
    r.spec.ignore_stop = true;
    auto slot = client.submit(r);
    if (!slot.is_ok()) {
      std::fprintf(stderr, "submit: %s\n", slot.status().to_string().c_str());
      std::exit(1);
    }
    slots.push_back(*slot);
    submitted.push_back(hearth::monotonic_ns());
  }
  std::vector<double> ttft;
  std::vector<bool> done(slots.size(), false);
  int64_t tokens = 0;
  double decode_rate = 0.0;
  uint64_t window_start = 0;
  int64_t tokens_at_start = 0;
  size_t finished = 0;
  while (finished < slots.size()) {
    const uint32_t seen = client.news();
    // The decode window: from the moment every stream has its first token to the moment
    // the first one ends; its rate is aggregate decode throughput at this concurrency.
    int64_t produced = 0;
    bool all_started = true, any_ended = finished > 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (done[i]) continue;
      const auto p = client.progress(slots[i]);
      produced += p.n_produced;
      all_started = all_started && p.n_produced >= 1;
      any_ended = any_ended || p.terminal();
    }
    const uint64_t now = hearth::monotonic_ns();
    if (window_start == 0 && all_started && !any_ended) {
      window_start = now;
      tokens_at_start = produced;
    } else if (window_start != 0 && decode_rate == 0.0 && any_ended && now > window_start) {
      decode_rate = static_cast<double>(produced - tokens_at_start) / (static_cast<double>(now - window_start) / 1e9);
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      if (done[i]) continue;
      const auto p = client.progress(slots[i]);
      if (!p.terminal()) continue;
      const auto& h = client.broker().slot(slots[i]);
      ttft.push_back(static_cast<double>(h.first_token_ns - submitted[i]) / 1e6);
      tokens += p.n_produced;
      client.release(slots[i]);
      done[i] = true;
      ++finished;
    }
    client.heartbeat();
    client.wait(seen, 20ms);
  }
  const double seconds = static_cast<double>(hearth::monotonic_ns() - start) / 1e9;
  std::sort(ttft.begin(), ttft.end());
  return {ttft[ttft.size() / 2], ttft.back(), static_cast<double>(tokens) / seconds, decode_rate};
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"model", "prompt-tokens", "max-tokens", "streams"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "serving_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  const std::string model = args->get("model").value_or("/tmp/hearth-bench/models/1b-q4_0.gguf");
  const int prompt_tokens = static_cast<int>(args->get_int("prompt-tokens", 2, 4000)->value_or(32));
  const int max_tokens = static_cast<int>(args->get_int("max-tokens", 1, 4000)->value_or(32));
  std::vector<int> stream_counts;
  std::stringstream list(args->get("streams").value_or("1,4,16,64"));
  for (std::string item; std::getline(list, item, ',');) stream_counts.push_back(std::stoi(item));
  hearth::bench::ensure_synth_1b(model);
  const std::string shm = hearth::bench::shm_dir();
  const std::string instance = "bench-serving";
  if (!hearth::bench::publish(model, instance, shm)) return 1;
  const int max_batch = 32;
  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("# serving: %s, prompt %d tokens, %d generated per stream, max batch %d sequences, %s threads\n",
              std::filesystem::path(model).filename().c_str(), prompt_tokens, max_tokens, max_batch,
              std::getenv("HEARTH_THREADS") ? std::getenv("HEARTH_THREADS") : "all");
  std::printf("| streams | continuous TTFT p50 ms | continuous TTFT max ms | continuous tok/s | continuous decode tok/s "
              "| static TTFT p50 ms | static TTFT max ms | static tok/s | static decode tok/s |\n"
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<std::vector<Figures>> results(2);
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<std::string> argv_engine = {hearth::bench::bin("hearth-engine"), "--instance", instance, "--shm-dir", shm,
                                            "--ctx", std::to_string(prompt_tokens + max_tokens + 16), "--slots", "80",
                                            "--max-batch-size", std::to_string(max_batch)};
    if (mode == 1) argv_engine.insert(argv_engine.end(), {"--static-batching", "100"});
    hearth::ChildProcess engine(argv_engine);
    if (!engine.read_line(60s)) {
      std::fprintf(stderr, "engine: %s\n", engine.err().c_str());
      return 1;
    }
    auto client = hearth::BrokerClient::connect(hearth::segment_path(shm, instance, "broker"));
    if (!client.is_ok()) {
      std::fprintf(stderr, "%s\n", client.status().to_string().c_str());
      return 1;
    }
    // Warm-up: weight pages, threads, and the KV blocks of the largest run (first-touch
    // page faults in the cache otherwise land in whichever mode runs first).
    run_streams(*client, 1, prompt_tokens, 4, 32000);
    run_streams(*client, *std::max_element(stream_counts.begin(), stream_counts.end()), prompt_tokens, max_tokens,
                32000);
    for (int streams : stream_counts) results[mode].push_back(run_streams(*client, streams, prompt_tokens, max_tokens, 32000));
    engine.signal(SIGTERM);
    engine.wait(30s);
  }
  for (size_t i = 0; i < stream_counts.size(); ++i) {
    const Figures& c = results[0][i];
    const Figures& s = results[1][i];
    std::printf("| %d | %.0f | %.0f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f |\n", stream_counts[i], c.ttft_p50_ms,
                c.ttft_max_ms, c.tokens_per_s, c.decode_tokens_per_s, s.ttft_p50_ms, s.ttft_max_ms, s.tokens_per_s,
                s.decode_tokens_per_s);
  }
  std::filesystem::remove(hearth::segment_path(shm, instance, "weights"));
  std::filesystem::remove(hearth::segment_path(shm, instance, "broker"));
  std::filesystem::remove(hearth::segment_path(shm, instance, "tp"));  // the engine group's
  std::filesystem::remove(hearth::segment_path(shm, instance, "kv"));  // the resident KV cache
  return 0;
}
