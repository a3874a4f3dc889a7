// Speculative decoding's speed, side by side in one run on one host: decode tok/s of one
// stream with and without prompt-lookup drafts (--spec ngram), for a workload whose output
// repeats its input and one whose output repeats nothing; then with and without a draft
// model (--spec draft: the model's first --draft-layers blocks) for a target it agrees
// with by construction and one it does not; then the throughput of N concurrent streams
// with and without prompt lookup. Each figure is the median of --reps runs, plain and
// speculative alternating (after one untimed warm-up); the tokens of the two must be the
// same.
//
//   spec_bench [--model M.gguf] [--threads N] [--gen 128] [--reps 3] [--streams 16] [--spec-tokens 4]
//              [--draft-layers 2 (0: no draft-model figures)]
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
#include "ipc/segment.h"
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

// A copy of `from` written to `to` once: its first `layers` blocks (all: -1), and from
// block `silent_from` on their output matrices (attention output, FFN down) zero, so
// that those blocks add nothing to the residual stream (while their weights are still
// read every step); the other matrices as they are.
Status write_copy(const std::string& from, const std::string& to, int32_t layers, int32_t silent_from) {
  if (std::filesystem::exists(to)) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(LoadedModel m, model_open(from));
  if (layers >= 0) m.config.n_layers = std::min(m.config.n_layers, layers);
  const std::string tmp = to + ".tmp";
  HEARTH_RETURN_IF_ERROR(gguf_export(m, DType::kQ4_0, tmp, [&](const std::string& name) -> std::optional<ExportedTensor> {
    const TensorView* t = m.find(name);
    if (t == nullptr) return std::nullopt;
    ExportedTensor e{t->dtype, {}};
    int block = -1;
    std::sscanf(name.c_str(), "blk.%d.", &block);
    if (block >= silent_from && (name.ends_with("attn_output.weight") || name.ends_with("ffn_down.weight"))) {
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
  auto args = Args::parse(argv_s, {"model", "threads", "gen", "reps", "streams", "spec-tokens", "draft-layers"}, {});
  if (!args.is_ok()) return fail(args.status());
  auto threads = args->get_int("threads", 1, 256);
  auto gen_flag = args->get_int("gen", 8, 4096);
  auto reps_flag = args->get_int("reps", 1, 100);
  auto streams_flag = args->get_int("streams", 0, 256);
  auto k_flag = args->get_int("spec-tokens", 1, kMaxSpecTokens);
  auto draft_flag = args->get_int("draft-layers", 0, 64);
  for (const auto* f : {&threads, &gen_flag, &reps_flag, &streams_flag, &k_flag, &draft_flag}) {
    if (!f->is_ok()) return fail(f->status());
  }
  const int gen = static_cast<int>(gen_flag->value_or(128));
  const int reps = static_cast<int>(reps_flag->value_or(3));
  const int streams = static_cast<int>(streams_flag->value_or(16));
  const int draft_layers = static_cast<int>(draft_flag->value_or(2));
  std::string path = args->get("model").value_or("");
  if (path.empty()) {
    path = "/tmp/hearth-bench/1b-q4_0.gguf";
    hearth::bench::ensure_synth_1b(path);
  }
  const std::string stem = std::filesystem::path(path).replace_extension("").string();
  const std::string cycling_path = stem + "-cycling.gguf";
  if (Status st = write_copy(path, cycling_path, -1, 0); !st.is_ok()) return fail(st);
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
    // The prompt as ids, for bench/spec_peer.sh to give llama.cpp the same one.
    if (std::FILE* f = std::fopen((stem + "-cycling.prompt").c_str(), "w")) {
      for (size_t i = 0; i < round.size(); ++i) std::fprintf(f, "%s%d", i ? "," : "", round[i]);
      std::fputc('\n', f);
      std::fclose(f);
    }
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
  // One stream of each workload with and without `spec` (alternating, median of reps).
  auto single_stream = [&](const std::vector<Workload>& list, const GenerateOptions& spec_options) -> Status {
    for (const Workload& w : list) {
      Figures f;
      for (int r = 0; r < reps; ++r) {
        GenerateOptions o;
        o.spec.max_tokens = gen;
        o.spec.ignore_stop = true;
        o.spec.sampling = w.sampling;
        GenerateOptions with = spec_options;
        with.spec = o.spec;
        auto first = generate(*w.model, *cache, w.prompt, r % 2 == 0 ? o : with);
        auto second = generate(*w.model, *cache, w.prompt, r % 2 == 0 ? with : o);
        auto& plain = r % 2 == 0 ? first : second;
        auto& fast = r % 2 == 0 ? second : first;
        HEARTH_RETURN_IF_ERROR(plain.status());
        HEARTH_RETURN_IF_ERROR(fast.status());
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
    return Status::ok();
  };
  std::printf("| workload | plain tok/s | ngram tok/s | speed-up | drafts kept | same tokens |\n|---|---|---|---|---|---|\n");
  GenerateOptions ngram;
  ngram.speculative = spec;
  if (Status st = single_stream(workloads, ngram); !st.is_ok()) return fail(st);

  if (draft_layers > 0) {
    // The draft model: the 1B model's first blocks (a truncated-layer copy), drafting for
    // a copy of the 1B model whose later blocks are silent (it computes what its first
    // blocks compute, so the draft agrees with it by construction, yet every weight is
    // read each step: a 1B step's cost), and for the 1B model itself, for which the
    // truncated copy is a poor draft (adaptive drafting has to turn itself off).
    const std::string silent_path = fmt::format("{}-silent{}.gguf", stem, draft_layers);
    const std::string draft_path = fmt::format("{}-first{}.gguf", stem, draft_layers);
    if (Status st = write_copy(path, silent_path, -1, draft_layers); !st.is_ok()) return fail(st);
    if (Status st = write_copy(path, draft_path, draft_layers, config.n_layers); !st.is_ok()) return fail(st);
    auto silent_source = cli::open_model_files(silent_path, {});
    auto draft_source = cli::open_model_files(draft_path, {});
    if (!silent_source.is_ok()) return fail(silent_source.status());
    if (!draft_source.is_ok()) return fail(draft_source.status());
    const ModelConfig& dc = draft_source->config;
    auto silent = Model::create(silent_source->config, silent_source->tensors, *backend, 512, {.layout = silent_source->layout});
    auto draft = Model::create(dc, draft_source->tensors, *backend, 512, {.layout = draft_source->layout});
    auto draft_cache = KvCache::create(*backend, {dc.n_layers, dc.kv_dim(), 16, blocks});
    if (!silent.is_ok()) return fail(silent.status());
    if (!draft.is_ok()) return fail(draft.status());
    if (!draft_cache.is_ok()) return fail(draft_cache.status());
    const std::vector<Workload> pairs = {
        {"draft agrees by construction (greedy; later blocks silent)", silent->get(), distinct, {.temperature = 0.0f}},
        {"draft disagrees (greedy; the 1B model)", model->get(), distinct, {.temperature = 0.0f}},
        {"draft disagrees (temperature 1; the 1B model)", model->get(), distinct, {.temperature = 1.0f, .seed = 7}},
    };
    GenerateOptions drafted;
    drafted.speculative = spec;
    drafted.speculative.method = SpecMethod::kDraft;
    drafted.draft_model = draft->get();
    drafted.draft_cache = &*draft_cache;
    {  // warm-up
      GenerateOptions o = drafted;
      o.spec.max_tokens = 8;
      if (auto r = generate(**silent, *cache, distinct, o); !r.is_ok()) return fail(r.status());
    }
    std::printf("\n# draft model: the first %d of %d blocks (%s of %s of weights)\n", draft_layers, config.n_layers,
                human_bytes(std::filesystem::file_size(draft_path)).c_str(),
                human_bytes(std::filesystem::file_size(path)).c_str());
    std::printf("| workload | plain tok/s | draft-model tok/s | speed-up | drafts kept | same tokens |\n|---|---|---|---|---|---|\n");
    if (Status st = single_stream(pairs, drafted); !st.is_ok()) return fail(st);
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
