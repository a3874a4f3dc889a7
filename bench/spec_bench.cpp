// Speculative decoding's speed, side by side in one run on one host: decode tok/s of one
// stream with and without prompt-lookup drafts (--spec ngram), for a workload whose output
// repeats its input and one whose output repeats nothing, then the throughput of N
// concurrent streams of each with and without. Each figure is the median of --reps runs,
// plain and speculative alternating (after one untimed warm-up); the tokens of the two
// must be the same.
//
//   spec_bench [--model M.gguf] [--threads N] [--gen 128] [--reps 3] [--streams 16] [--spec-tokens 4]
//
// Without --model it writes the 1B synthetic Llama as Q4_0 (hearth synth --preset 1b).
// A random model does not copy text, so the repeating workload runs a copy of it built
// to: its blocks' outputs (attention output and FFN down) are zero, so each token
// follows from the one before alone (the weights are still all read every step, as the
// model's) and its greedy text falls into a cycle; the prompt holds the text up to and
// through the cycle once, and the output goes round it again. The other workload samples
// the model itself at temperature 1 from a prompt of distinct tokens.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "common/args.h"
#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/cpu/cpu_backend.h"
#include "kernels/cpu/isa.h"
#include "loader/gguf_export.h"
#include "loader/model.h"
#include "tools/model_source.h"

namespace {

using namespace hearth;

int fail(const Status& s) {
  std::fprintf(stderr, "spec_bench: %s\n", s.to_string().c_str());
  return 1;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// `from` with every block's output matrices (attention output, FFN down) zero, the
// other matrices as they are, written to `to` once.
Status write_cycling_copy(const std::string& from, const std::string& to) {
  if (std::filesystem::exists(to)) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(LoadedModel m, model_open(from));
  const std::string tmp = to + ".tmp";
  HEARTH_RETURN_IF_ERROR(gguf_export(m, DType::kQ4_0, tmp, [&](const std::string& name) -> std::optional<ExportedTensor> {
    const TensorView* t = m.find(name);
    if (t == nullptr) return std::nullopt;
    ExportedTensor e{t->dtype, {}};
    if (name.ends_with("attn_output.weight") || name.ends_with("ffn_down.weight")) {
      e.bytes.assign(t->bytes, std::byte{0});  // every block scale 0: zeros in any format
    } else {
      e.bytes.assign(t->data, t->data + t->bytes);
    }
    return e;
  }));
  std::filesystem::rename(tmp, to);
  return Status::ok();
}

struct Workload {
  std::string name;
  Model* model;
  std::vector<TokenId> prompt;
  SamplingParams sampling;
};

struct Figures {
  std::vector<double> plain, spec;
  uint64_t drafted = 0, kept = 0;
  bool same = true;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  auto args = Args::parse(argv_s, {"model", "threads", "gen", "reps", "streams", "spec-tokens"}, {});
  if (!args.is_ok()) return fail(args.status());
  auto threads = args->get_int("threads", 1, 256);
  auto gen_flag = args->get_int("gen", 8, 4096);
  auto reps_flag = args->get_int("reps", 1, 100);
  auto streams_flag = args->get_int("streams", 0, 256);
  auto k_flag = args->get_int("spec-tokens", 1, kMaxSpecTokens);
  for (const auto* f : {&threads, &gen_flag, &reps_flag, &streams_flag, &k_flag}) {
    if (!f->is_ok()) return fail(f->status());
  }
  const int gen = static_cast<int>(gen_flag->value_or(128));
  const int reps = static_cast<int>(reps_flag->value_or(3));
  const int streams = static_cast<int>(streams_flag->value_or(16));
  std::string path = args->get("model").value_or("");
  if (path.empty()) {
    path = "/tmp/hearth-bench/1b-q4_0.gguf";
    hearth::bench::ensure_synth_1b(path);
  }
  const std::string cycling_path = std::filesystem::path(path).replace_extension("").string() + "-cycling.gguf";
  if (Status st = write_cycling_copy(path, cycling_path); !st.is_ok()) return fail(st);
  auto source = cli::open_model_files(path, {});
  if (!source.is_ok()) return fail(source.status());
  auto cycling_source = cli::open_model_files(cycling_path, {});
  if (!cycling_source.is_ok()) return fail(cycling_source.status());
  const ModelConfig& config = source->config;
  CpuBackendOptions bo;
  bo.threads = static_cast<int>(threads->value_or(0));
  auto backend = make_cpu_backend(bo);
  const int32_t context = std::min(config.max_context, 512 + gen + 64);
  const int32_t blocks = (context + 15) / 16 * std::max(streams, 1) + 16;
  auto cache = KvCache::create(*backend, {config.n_layers, config.kv_dim(), 16, blocks});
  if (!cache.is_ok()) return fail(cache.status());
  auto model = Model::create(config, source->tensors, *backend, 512, {.layout = source->layout});
  if (!model.is_ok()) return fail(model.status());
  auto cycling = Model::create(cycling_source->config, cycling_source->tensors, *backend, 512,
                               {.layout = cycling_source->layout});
  if (!cycling.is_ok()) return fail(cycling.status());
  const SpecConfig spec{.method = SpecMethod::kNgram, .max_tokens = static_cast<int32_t>(k_flag->value_or(4))};

  // The peer harness's bench prompt: BOS, then 3 + (i * 7919) % (vocab - 3).
  const int32_t vocab = config.vocab_size;
  std::vector<TokenId> distinct{1};
  for (int i = 1; i < 128; ++i) distinct.push_back(3 + (i * 7919) % (vocab - 3));
  // The cycling model's text from there, until it has gone round its cycle once.
  std::vector<TokenId> round = distinct;
  {
    GenerateOptions o;
    o.spec.max_tokens = 384;
    o.spec.ignore_stop = true;
    o.spec.sampling.temperature = 0.0f;
    auto first = generate(**cycling, *cache, distinct, o);
    if (!first.is_ok()) return fail(first.status());
    const std::vector<TokenId>& t = first->tokens;
    size_t end = t.size();  // through the first repeat of a token: one cycle is in
    for (size_t i = 0; i < t.size() && end == t.size(); ++i) {
      for (size_t j = 0; j < i; ++j) {
        if (t[j] == t[i]) {
          end = i + 1;
          break;
        }
      }
    }
    round.insert(round.end(), t.begin(), t.begin() + static_cast<long>(end));
    std::printf("# the cycling copy's greedy text repeats itself after %zu tokens\n", end - 1);
  }
  const std::vector<Workload> workloads = {
      {"repeats its input (greedy; the 1B copy built to cycle)", cycling->get(), round, {.temperature = 0.0f}},
      {"repeats nothing (temperature 1; the 1B model)", model->get(), distinct, {.temperature = 1.0f, .seed = 7}},
  };
  for (const Workload& w : workloads) {  // warm-up: pages and caches
    GenerateOptions o;
    o.spec.max_tokens = 8;
    o.spec.sampling = w.sampling;
    if (auto r = generate(*w.model, *cache, w.prompt, o); !r.is_ok()) return fail(r.status());
  }

  std::printf("# speculative decoding (prompt lookup, up to %d drafted tokens): %s, %d threads, %s (%s)\n",
              spec.max_tokens, source->name.c_str(), backend->threads(), kernels::cpu::cpu_host_summary().c_str(),
              std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())).c_str());
  std::printf("| workload | plain tok/s | ngram tok/s | speed-up | drafts kept | same tokens |\n|---|---|---|---|---|---|\n");
  for (const Workload& w : workloads) {
    Figures f;
    for (int r = 0; r < reps; ++r) {
      GenerateOptions o;
      o.spec.max_tokens = gen;
      o.spec.ignore_stop = true;
      o.spec.sampling = w.sampling;
      GenerateOptions with = o;
      with.speculative = spec;
      auto first = generate(*w.model, *cache, w.prompt, r % 2 == 0 ? o : with);
      auto second = generate(*w.model, *cache, w.prompt, r % 2 == 0 ? with : o);
      auto& plain = r % 2 == 0 ? first : second;
      auto& fast = r % 2 == 0 ? second : first;
      if (!plain.is_ok()) return fail(plain.status());
      if (!fast.is_ok()) return fail(fast.status());
      f.plain.push_back((plain->tokens.size() - 1) / plain->decode_seconds);
      f.spec.push_back((fast->tokens.size() - 1) / fast->decode_seconds);
      f.drafted += fast->spec.draft_tokens;
      f.kept += fast->spec.accepted;
      f.same = f.same && plain->tokens == fast->tokens;
    }
    const double a = median(f.plain), b = median(f.spec);
    std::printf("| %s | %.2f | %.2f | %.2fx | %.1f%% of %llu | %s |\n", w.name.c_str(), a, b, b / a,
                f.drafted ? 100.0 * static_cast<double>(f.kept) / static_cast<double>(f.drafted) : 0.0,
                static_cast<unsigned long long>(f.drafted / static_cast<uint64_t>(reps)), f.same ? "yes" : "NO");
    std::fflush(stdout);
  }

  if (streams > 0) {
    // N streams at once through one driver: output tok/s over the whole run.
    std::printf("\n| %d streams | plain tok/s | ngram tok/s | ratio | drafts kept |\n|---|---|---|---|---|\n", streams);
    for (const Workload& w : workloads) {
      std::vector<double> plain, fast;
      uint64_t drafted = 0, kept = 0;
      for (int r = 0; r < reps; ++r) {
        for (bool speculative : {r % 2 == 1, r % 2 == 0}) {
          ModelRunner runner(*w.model, *cache);
          DriverConfig dc{.scheduler = {.max_batch_size = streams, .max_batched_tokens = 512},
                          .max_sequence_tokens = context};
          if (speculative) dc.spec = spec;
          Driver driver(runner, dc);
          for (int s = 0; s < streams; ++s) {
            SamplingParams sampling = w.sampling;
            sampling.seed = static_cast<uint64_t>(s + 1);
            const auto added = driver.add(static_cast<uint64_t>(s),
                                          {.tokens = w.prompt, .n_prompt = static_cast<int32_t>(w.prompt.size()),
                                           .spec = {.sampling = sampling, .max_tokens = gen, .ignore_stop = true}});
            if (!added.is_ok()) return fail(added.status());
          }
          // Timed from the first decode step: every prompt is in by then.
          size_t tokens = 0;
          auto start = std::chrono::steady_clock::now();
          const Status st = driver.run_until_idle([&](const StepEvent& e) {
            if (e.n_produced == 1) {
              start = std::chrono::steady_clock::now();
              tokens = 0;
            }
            ++tokens;
            return true;
          });
          if (!st.is_ok()) return fail(st);
          const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          (speculative ? fast : plain).push_back(static_cast<double>(tokens) / s);
          if (speculative) {
            drafted += driver.spec_stats().draft_tokens;
            kept += driver.spec_stats().accepted;
          }
        }
      }
      const double a = median(plain), b = median(fast);
      std::printf("| %s | %.2f | %.2f | %.2fx | %.1f%% of %llu |\n", w.name.c_str(), a, b, b / a,
                  drafted ? 100.0 * static_cast<double>(kept) / static_cast<double>(drafted) : 0.0,
                  static_cast<unsigned long long>(drafted / static_cast<uint64_t>(reps)));
      std::fflush(stdout);
    }
  }
  return 0;
}
