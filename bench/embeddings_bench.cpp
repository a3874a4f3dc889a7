// Embeddings batched through the engine against the same inputs one at a time, on a real
// hearth-engine process: 64 short inputs (16 tokens each by default) submitted together,
// which the engine runs in a few steps beside each other, then the same 64 each waited for
// before the next is sent. Inputs/s and prompt tokens/s of both, and the ratio.
// Requests go in through the broker, as hearth-frontend sends them (HTTP parsing, JSON and
// the frontend's normalising are not part of the figures).
// Usage: embeddings_bench [--model GGUF] [--inputs N] [--input-tokens N] [--pooling last|mean|cls]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/args.h"
#include "common/pooling.h"
#include "common/process.h"
#include "common/subprocess.h"
#include "ipc/broker_client.h"
#include "ipc/segment.h"
#include "kernels/cpu/isa.h"

namespace {

using namespace std::chrono_literals;

hearth::SubmitRequest input(int i, int tokens, hearth::Pooling pooling) {
  hearth::SubmitRequest r;
  r.prompt.push_back(1);
  for (int k = 1; k < tokens; ++k) r.prompt.push_back(3 + (k * 7919 + i * 131) % 31000);
  r.spec.max_tokens = 1;
  r.spec.pooling = pooling;
  return r;
}

// Waits until every slot is done (releasing each); false when one failed.
bool wait_all(hearth::BrokerClient& client, const std::vector<uint32_t>& slots) {
  std::vector<bool> done(slots.size(), false);
  size_t finished = 0;
  bool ok = true;
  while (finished < slots.size()) {
    const uint32_t seen = client.news();
    for (size_t i = 0; i < slots.size(); ++i) {
      if (done[i]) continue;
      const auto p = client.progress(slots[i]);
      if (!p.terminal()) continue;
      if (p.state != hearth::SlotState::kDone) {
        std::fprintf(stderr, "slot %u: %s\n", slots[i], p.error.c_str());
        ok = false;
      }
      client.release(slots[i]);
      done[i] = true;
      ++finished;
    }
    client.heartbeat();
    if (finished < slots.size()) client.wait(seen, 20ms);
  }
  return ok;
}

// Seconds for `n` inputs: all submitted at once, or each after the previous one is done.
double run(hearth::BrokerClient& client, int n, int tokens, hearth::Pooling pooling, bool batched) {
  const uint64_t start = hearth::monotonic_ns();
  std::vector<uint32_t> slots;
  for (int i = 0; i < n; ++i) {
    auto slot = client.submit(input(i, tokens, pooling));
    if (!slot.is_ok()) {
      std::fprintf(stderr, "submit: %s\n", slot.status().to_string().c_str());
      std::exit(1);
    }
    slots.push_back(*slot);
    if (!batched) {
      if (!wait_all(client, slots)) std::exit(1);
      slots.clear();
    }
  }
  if (!wait_all(client, slots)) std::exit(1);
  return static_cast<double>(hearth::monotonic_ns() - start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = hearth::Args::parse({argv + 1, argv + argc}, {"model", "inputs", "input-tokens", "pooling"}, {});
  if (!args.is_ok()) {
    std::fprintf(stderr, "embeddings_bench: %s\n", args.status().message().c_str());
    return 2;
  }
  const std::string model = args->get("model").value_or("/tmp/hearth-bench/models/1b-q4_0.gguf");
  const int n = static_cast<int>(args->get_int("inputs", 1, 1024)->value_or(64));
  const int tokens = static_cast<int>(args->get_int("input-tokens", 2, 4000)->value_or(16));
  const auto pooling = hearth::pooling_from_name(args->get("pooling").value_or("last"));
  if (!pooling) {
    std::fprintf(stderr, "embeddings_bench: --pooling must be last, mean or cls\n");
    return 2;
  }
  hearth::bench::ensure_synth_1b(model);
  const std::string shm = hearth::bench::shm_dir();
  const std::string instance = "bench-embeddings";
  if (!hearth::bench::publish(model, instance, shm)) return 1;
  hearth::ChildProcess engine({hearth::bench::bin("hearth-engine"), "--instance", instance, "--shm-dir", shm, "--ctx", "512",
                               "--slots", std::to_string(n + 8), "--max-batch-size", std::to_string(n)});
  if (!engine.read_line(60s)) {
    std::fprintf(stderr, "engine: %s\n", engine.err().c_str());
    return 1;
  }
  auto client = hearth::BrokerClient::connect(hearth::segment_path(shm, instance, "broker"));
  if (!client.is_ok()) {
    std::fprintf(stderr, "%s\n", client.status().to_string().c_str());
    return 1;
  }
  run(*client, n, tokens, *pooling, true);  // warm-up: weight pages, threads, KV blocks
  const double batched = run(*client, n, tokens, *pooling, true);
  const double alone = run(*client, n, tokens, *pooling, false);
  std::printf("# cpu: %s\n", hearth::kernels::cpu::cpu_host_summary().c_str());
  std::printf("# embeddings: %s, %d inputs of %d tokens, %s pooling, %s threads\n",
              std::filesystem::path(model).filename().c_str(), n, tokens,
              std::string(hearth::pooling_name(*pooling)).c_str(),
              std::getenv("HEARTH_THREADS") ? std::getenv("HEARTH_THREADS") : "all");
  std::printf("| mode | seconds | inputs/s | prompt tokens/s |\n| --- | ---: | ---: | ---: |\n");
  for (const auto& [name, s] : {std::pair{"batched", batched}, std::pair{"one at a time", alone}}) {
    std::printf("| %s | %.3f | %.1f | %.0f |\n", name, s, n / s, static_cast<double>(n) * tokens / s);
  }
  std::printf("# batched is %.2fx one at a time\n", alone / batched);
  engine.signal(SIGTERM);
  engine.wait(30s);
  for (const char* segment : {"weights", "broker", "tp", "kv"}) {
    std::filesystem::remove(hearth::segment_path(shm, instance, segment));
  }
  return 0;
}
