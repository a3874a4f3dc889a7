// Multi-LoRA serving's cost, side by side in one run on one host: N concurrent streams
// decoding (continuous batching, the engine's Driver) with no adapter, with three
// adapters and the base mixed in every step, and with the same four groups of requests
// run one group at a time. Prints the median decode step time and decode tok/s of each
// (median of --reps runs), and checks that a stream's tokens are the same whether its
// adapter shares the batch or not.
//
//   lora_bench [--model M.gguf] [--threads N] [--streams 48] [--gen 32] [--rank 16] [--reps 3]
//
// Without --model it runs the 1B synthetic Llama as Q4_0 (hearth synth --preset 1b),
// with three synthetic adapters (hearth lora synth) on q, k, v, o, gate, up and down.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/args.h"
#include "engine/core/driver.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "loader/lora.h"
#include "loader/model.h"
#include "tools/model_source.h"

namespace {

using namespace hearth;
using Clock = std::chrono::steady_clock;

int fail(const Status& s) {
  std::fprintf(stderr, "lora_bench: %s\n", s.to_string().c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Stream {
  std::vector<TokenId> prompt;
  int32_t adapter = -1;
};

struct Run {
  double step_ms = 0;         // median decode step
  double decode_tps = 0;      // decoded tokens / decode time
  std::map<uint64_t, std::vector<TokenId>> tokens;
};

// The streams `ids` in one batch: prefill, then decode to `gen` tokens each; the decode
// steps (every stream past its first token) timed.
Result<Run> run_batch(ModelRunner& runner, const std::vector<Stream>& streams, const std::vector<uint64_t>& ids,
                      int gen, int32_t max_tokens_per_step) {
  Driver driver(runner, {.scheduler = {.max_batch_size = static_cast<int32_t>(ids.size()),
                                       .max_batched_tokens = max_tokens_per_step},
                         .max_sequence_tokens = 512});
  for (uint64_t id : ids) {
    const Stream& s = streams[id];
    HEARTH_RETURN_IF_ERROR(driver
                               .add(id, {.tokens = s.prompt,
                                         .n_prompt = static_cast<int32_t>(s.prompt.size()),
                                         .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = gen, .ignore_stop = true},
                                         .adapter = s.adapter})
                               .status());
  }
  Run run;
  std::vector<StepEvent> events;
  std::vector<double> steps;
  size_t decoded = 0;
  double decode_s = 0;
  while (!driver.idle()) {
    const bool decoding = run.tokens.size() == ids.size();  // every stream has its first token
    const auto t0 = Clock::now();
    bool ran = false;
    HEARTH_RETURN_IF_ERROR(driver.step(events, ran));
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    for (const StepEvent& e : events) run.tokens[e.id].push_back(e.token.id);
    if (decoding) {
      steps.push_back(s * 1e3);
      decode_s += s;
      decoded += events.size();
    }
  }
  run.step_ms = median(steps);
  run.decode_tps = decode_s > 0 ? static_cast<double>(decoded) / decode_s : 0;
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  auto args = Args::parse(std::vector<std::string>(argv + 1, argv + argc),
                          {"model", "threads", "streams", "gen", "rank", "reps"}, {});
  if (!args.is_ok()) return fail(args.status());
  auto threads = args->get_int("threads", 0, 1024);
  auto streams_flag = args->get_int("streams", 4, 256);
  auto gen_flag = args->get_int("gen", 2, 256);
  auto rank_flag = args->get_int("rank", 1, 256);
  auto reps_flag = args->get_int("reps", 1, 99);
  for (const auto* f : {&threads, &streams_flag, &gen_flag, &rank_flag, &reps_flag}) {
    if (!f->is_ok()) return fail(f->status());
  }
  const int n_streams = static_cast<int>(streams_flag->value_or(48)) / 4 * 4;
  const int gen = static_cast<int>(gen_flag->value_or(32));
  const auto rank = static_cast<int32_t>(rank_flag->value_or(16));
  const int reps = static_cast<int>(reps_flag->value_or(3));
  std::string path = args->get("model").value_or("");
  if (path.empty()) {
    path = "/tmp/hearth-bench/1b-q4_0.gguf";
    hearth::bench::ensure_synth_1b(path);
  }
  auto base = model_open(path);
  if (!base.is_ok()) return fail(base.status());
  auto source = cli::open_model_files(path, {});
  if (!source.is_ok()) return fail(source.status());
  const ModelConfig& config = source->config;
  std::vector<LoraAdapter> adapters;
  for (int i = 0; i < 3; ++i) {
    const std::string dir = fmt::format("{}-lora-r{}-{}", std::filesystem::path(path).replace_extension("").string(), rank, i);
    if (!std::filesystem::exists(dir)) {
      if (Status st = lora_synth_write(*base, {.rank = rank, .alpha = 2.0 * rank, .seed = static_cast<uint64_t>(i + 1)}, dir);
          !st.is_ok()) {
        return fail(st);
      }
    }
    auto a = lora_open(dir, config, source->tensors);
    if (!a.is_ok()) return fail(a.status());
    adapters.push_back(std::move(a).value());
  }
  CpuBackendOptions bo;
  bo.threads = static_cast<int>(threads->value_or(0));
  auto backend = make_cpu_backend(bo);
  const int32_t per_stream_blocks = (64 + gen + 15) / 16 + 1;
  auto cache = KvCache::create(*backend, {config.n_layers, config.kv_dim(), 16, per_stream_blocks * n_streams + 16});
  if (!cache.is_ok()) return fail(cache.status());
  auto model = Model::create(config, source->tensors, *backend, 512,
                             {.layout = source->layout, .max_adapters = 3, .max_lora_rank = rank});
  if (!model.is_ok()) return fail(model.status());
  for (int i = 0; i < 3; ++i) {
    if (Status st = (*model)->set_adapter(i, adapters[static_cast<size_t>(i)]); !st.is_ok()) return fail(st);
  }
  ModelRunner runner(**model, *cache);

  // Streams with distinct 32-token prompts; stream i's adapter is i % 4 - 1 (-1: none).
  std::vector<Stream> streams(static_cast<size_t>(n_streams));
  for (int i = 0; i < n_streams; ++i) {
    Stream& s = streams[static_cast<size_t>(i)];
    s.prompt.push_back(1);
    for (int j = 1; j < 32; ++j) s.prompt.push_back(3 + (i * 131 + j * 7919) % (config.vocab_size - 3));
    s.adapter = i % 4 - 1;
  }
  std::vector<Stream> no_adapter = streams;
  for (Stream& s : no_adapter) s.adapter = -1;
  std::vector<uint64_t> all;
  for (int i = 0; i < n_streams; ++i) all.push_back(static_cast<uint64_t>(i));
  std::vector<std::vector<uint64_t>> groups(4);
  for (int i = 0; i < n_streams; ++i) groups[static_cast<size_t>(i % 4)].push_back(static_cast<uint64_t>(i));

  std::printf("# multi-LoRA decode: %s, %d streams x %d tokens, 3 adapters of rank %d on q,k,v,o,gate,up,down, "
              "%d threads, %s (%s)\n",
              source->name.c_str(), n_streams, gen, rank, backend->threads(), kernels::cpu::cpu_host_summary().c_str(),
              std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())).c_str());
  if (auto warm = run_batch(runner, streams, {0, 1, 2, 3}, 4, 512); !warm.is_ok()) return fail(warm.status());
  std::vector<double> none_ms, none_tps, mixed_ms, mixed_tps, serial_tps;
  bool same = true;
  for (int r = 0; r < reps; ++r) {
    auto none = run_batch(runner, no_adapter, all, gen, 512);
    if (!none.is_ok()) return fail(none.status());
    auto mixed = run_batch(runner, streams, all, gen, 512);
    if (!mixed.is_ok()) return fail(mixed.status());
    none_ms.push_back(none->step_ms);
    none_tps.push_back(none->decode_tps);
    mixed_ms.push_back(mixed->step_ms);
    mixed_tps.push_back(mixed->decode_tps);
    // The same requests, one group (one adapter, or none) at a time.
    double decoded = 0, seconds = 0;
    for (const auto& g : groups) {
      auto alone = run_batch(runner, streams, g, gen, 512);
      if (!alone.is_ok()) return fail(alone.status());
      for (uint64_t id : g) same = same && alone->tokens[id] == mixed->tokens[id];
      decoded += static_cast<double>(g.size()) * (gen - 1);
      seconds += static_cast<double>(g.size()) * (gen - 1) / alone->decode_tps;
    }
    serial_tps.push_back(decoded / seconds);
  }
  std::printf("| batch | decode step (ms) | decode tok/s |\n| --- | --- | --- |\n");
  std::printf("| %d streams, no adapter | %.1f | %.1f |\n", n_streams, median(none_ms), median(none_tps));
  std::printf("| %d streams, 3 adapters + base mixed | %.1f | %.1f |\n", n_streams, median(mixed_ms), median(mixed_tps));
  std::printf("| the same, one adapter group of %d at a time | - | %.1f |\n", n_streams / 4, median(serial_tps));
  std::printf("# mixed vs none: step time x%.3f; mixed vs one group at a time: throughput x%.2f; same tokens: %s\n",
              median(mixed_ms) / median(none_ms), median(mixed_tps) / median(serial_tps), same ? "yes" : "NO");
  return same ? 0 : 1;
}
