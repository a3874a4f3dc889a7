// Prefill and decode speed of one model on the CPU backend, measured the way
// ../shared/tools/peer measures llama.cpp, so the two print comparable JSON lines:
// prompt id[0] = 1, id[i] = 3 + (i * 7919) % (vocab - 3); prefill = evaluating the whole
// prompt as one batch up to the first greedy token; decode = the next N greedy
// single-token steps (EOS does not stop them); one untimed warm-up run (prompt plus
// two steps) first.
//
//   model_bench --model M.gguf [--threads N] [--prompt 128] [--gen 64] [--ctx 512] [--kv-dtype f16]
//   model_bench --attach INSTANCE ...   (the resident weights of a running hearth-loader)
//   model_bench ... --streams N          (N sequences batched, as hearth-engine runs them)
//
// prints {"model":..., "harness":"hearth", "threads":N, "kv_dtype":..., "prefill_tok_s":..., "decode_tok_s":...,
// "weight_bytes_per_token":..., "kv_bytes_last_token":..., "load_s":..., "first_ids":[16 ids]}.
//
// --streams N measures what llama.cpp's llama-batched-bench does: N sequences of their own
// prompts (id[0] = 1, then the ids above shifted by the stream's number, so that no two
// share a prefix), then `gen` greedy tokens each, through the engine's driver (continuous
// batching, chunked prefill of 512 tokens a step, all N sequences in one batch) after one
// untimed single-sequence warm-up. It prints {"harness":"hearth","mode":"batched",
// "streams":N, ..., "prefill_tok_s": N * prompt / (time until every stream has its first
// token), "decode_tok_s" and "decode_ms_per_step" over the steps after that in which every
// stream decodes a token (up to the end of the stream that finished prefill first),
// "decode_steps": how many}. Streams that finish prefill early decode while the others
// prefill; those steps count in prefill's time.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/args.h"
#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/core/model_runner.h"
#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "tools/model_source.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int fail(const hearth::Status& s) {
  std::fprintf(stderr, "model_bench: %s\n", s.to_string().c_str());
  return 1;
}

// The --streams run: see the header. Prints one JSON line.
int run_streams(hearth::Model& model, hearth::KvCache& cache, int streams, const std::vector<hearth::TokenId>& prompt,
                int gen, int vocab, const std::string& name, int threads, const char* kv_dtype) {
  using namespace hearth;
  ModelRunner runner(model, cache);
  DriverConfig config{.scheduler = {.max_batch_size = streams, .max_batched_tokens = 512, .prefix_caching = false},
                      .max_sequence_tokens = static_cast<int32_t>(prompt.size()) + gen + 1};
  Driver driver(runner, config);
  auto request = [&](int stream, int tokens) {
    SequenceRequest r{.tokens = prompt, .n_prompt = static_cast<int32_t>(prompt.size())};
    for (size_t i = 1; i < r.tokens.size(); ++i) {
      r.tokens[i] = static_cast<TokenId>(3 + (r.tokens[i] - 3 + stream) % (vocab - 3));
    }
    r.spec.sampling.temperature = 0.0f;
    r.spec.ignore_stop = true;
    r.spec.max_tokens = tokens;
    return r;
  };
  // Warm-up: one sequence, the prompt and two steps.
  if (auto added = driver.add(uint64_t(1) << 40, request(0, 3)); !added.is_ok()) return fail(added.status());
  if (Status st = driver.run_until_idle([](const StepEvent&) { return true; }); !st.is_ok()) return fail(st);

  for (int i = 0; i < streams; ++i) {
    if (auto added = driver.add(static_cast<uint64_t>(i), request(i, gen + 1)); !added.is_ok()) {
      return fail(added.status());
    }
  }
  // Step by step: prefill ends with the step that gives the last stream its first token;
  // decode is the steps after it in which every stream decodes a token (as in
  // llama-batched-bench, where they all move together), up to the first stream's end.
  std::vector<StepEvent> events;
  int first = 0, full_steps = 0;
  bool all_first = false, full = true;
  const double t0 = now();
  double t_first = 0, t_full_end = 0;
  for (;;) {
    bool ran = false;
    if (Status st = driver.step(events, ran); !st.is_ok()) return fail(st);
    if (!ran) break;
    const double t = now();
    int decoded = 0;
    bool finished = false;
    for (const StepEvent& e : events) {
      if (e.finish == FinishReason::kError) return fail(e.error);
      (e.n_produced == 1 ? first : decoded) += 1;
      finished = finished || e.finish != FinishReason::kNone;
    }
    if (!all_first) {
      all_first = first == streams;
      t_first = t;
      continue;
    }
    if (full && decoded == streams) {
      ++full_steps;
      t_full_end = t;
    } else {
      full = false;
    }
    full = full && !finished;
  }
  if (full_steps == 0) {
    std::fprintf(stderr, "model_bench: no step had every stream decoding; give --gen more steps\n");
    return 2;
  }
  const double decode_s = t_full_end - t_first;
  std::printf("{\"model\":\"%s\",\"harness\":\"hearth\",\"mode\":\"batched\",\"cpu\":\"%s\",\"isa\":\"%s\","
              "\"threads\":%d,\"streams\":%d,\"n_prompt\":%zu,\"n_gen\":%d,\"kv_dtype\":\"%s\",\"prefill_tok_s\":%.2f,"
              "\"decode_tok_s\":%.2f,\"decode_ms_per_step\":%.3f,\"decode_steps\":%d}\n",
              name.c_str(), kernels::cpu::cpu_host_summary().c_str(),
              std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())).c_str(), threads, streams, prompt.size(),
              gen, kv_dtype, streams * static_cast<double>(prompt.size()) / (t_first - t0),
              streams * static_cast<double>(full_steps) / decode_s, 1e3 * decode_s / full_steps, full_steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  std::vector<std::string> argv_strings(argv + 1, argv + argc);
  auto args = Args::parse(argv_strings, {"model", "attach", "shm-dir", "threads", "prompt", "gen", "ctx", "kv-dtype", "streams"}, {});
  if (!args.is_ok()) return fail(args.status());
  const std::string model_path = args->get("model").value_or("");
  const std::string attach = args->get("attach").value_or("");
  if (model_path.empty() == attach.empty()) {
    std::fprintf(stderr, "usage: model_bench (--model PATH | --attach INSTANCE) [--threads N] [--prompt 128] "
                         "[--gen 64] [--ctx 512] [--kv-dtype f32|f16|bf16] [--streams N]\n");
    return 2;
  }
  auto threads = args->get_int("threads", 1, 256);
  auto n_prompt = args->get_int("prompt", 1, 1 << 16);
  auto n_gen = args->get_int("gen", 2, 1 << 16);
  auto ctx = args->get_int("ctx", 16, 1 << 20);
  auto n_streams = args->get_int("streams", 1, 1024);
  for (const auto* r : {&threads, &n_prompt, &n_gen, &ctx, &n_streams}) {
    if (!r->is_ok()) return fail(r->status());
  }
  auto kv_dtype = kv_dtype_from_name(args->get("kv-dtype").value_or("f16"));
  if (!kv_dtype.is_ok()) return fail(kv_dtype.status());

  const double t0 = now();
  auto source = attach.empty() ? cli::open_model_files(model_path, {})
                               : cli::attach_instance(attach, args->get("shm-dir").value_or(""));
  if (!source.is_ok()) return fail(source.status());
  const double load_s = now() - t0;
  const ModelConfig& config = source->config;

  const int prompt_len = static_cast<int>(n_prompt->value_or(128));
  const int gen = static_cast<int>(n_gen->value_or(64));
  const int context = static_cast<int>(ctx->value_or(512));
  if (prompt_len < 1 || gen < 2 || prompt_len + gen + 1 > context || context > config.max_context) {
    std::fprintf(stderr, "model_bench: need 1 <= prompt, 2 <= gen, prompt + gen < ctx <= %d\n", config.max_context);
    return 2;
  }
  CpuBackendOptions backend_options;
  backend_options.threads = static_cast<int>(threads->value_or(0));
  auto backend = make_cpu_backend(backend_options);
  constexpr int32_t kBlockSize = 16;
  // --streams: room for every stream's whole sequence (and the warm-up's), 512-token steps.
  const int streams = static_cast<int>(n_streams->value_or(0));
  const int32_t blocks = streams > 0 ? (streams + 1) * ((prompt_len + gen + 1 + kBlockSize - 1) / kBlockSize)
                                     : (context + kBlockSize - 1) / kBlockSize;
  auto cache = KvCache::create(*backend, {config.n_layers, config.kv_dim(), kBlockSize, blocks, *kv_dtype});
  if (!cache.is_ok()) return fail(cache.status());
  auto model = Model::create(config, source->tensors, *backend, streams > 0 ? 512 : prompt_len,
                             {.layout = source->layout});
  if (!model.is_ok()) return fail(model.status());

  std::vector<TokenId> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) {
    prompt[static_cast<size_t>(i)] =
        i == 0 ? 1 : static_cast<TokenId>(3 + (static_cast<int64_t>(i) * 7919) % (config.vocab_size - 3));
  }
  if (streams > 0) {
    std::string name = attach.empty() ? std::filesystem::path(model_path).filename().string() : attach;
    return run_streams(**model, *cache, streams, prompt, gen, config.vocab_size, name,
                       backend_options.threads == 0 ? default_thread_count() : backend_options.threads,
                       kernels::kv_dtype_name(*kv_dtype));
  }
  GenerateOptions options;
  options.spec.sampling.temperature = 0.0f;  // greedy
  options.spec.ignore_stop = true;
  options.context = context;
  options.spec.max_tokens = 3;  // warm-up: the prompt and two steps
  auto warm = generate(**model, *cache, prompt, options);
  if (!warm.is_ok()) return fail(warm.status());
  options.spec.max_tokens = gen + 1;  // the first token ends prefill; `gen` steps follow
  auto run = generate(**model, *cache, prompt, options);
  if (!run.is_ok()) return fail(run.status());

  // Weights a decode step reads: every tensor but the embedding table (one row of it);
  // of a mixture of experts, only the experts the step's one token was routed to
  // (n_experts_used of each layer's n_experts, all of one size).
  uint64_t weight_bytes = 0, expert_bytes = 0;
  for (const TensorView& t : source->tensors) {
    if (t.name == "token_embd.weight") continue;
    // With experts, every ffn_gate / ffn_up / ffn_down tensor is one expert's.
    bool expert = false;
    for (const char* m : {".ffn_gate.", ".ffn_up.", ".ffn_down."}) {
      expert = expert || (config.n_experts > 0 && t.name.find(m) != std::string::npos);
    }
    (expert ? expert_bytes : weight_bytes) += t.bytes;
  }
  if (config.n_experts > 0) {
    weight_bytes += expert_bytes / static_cast<uint64_t>(config.n_experts) * static_cast<uint64_t>(config.n_experts_used);
  }
  std::string name = attach.empty() ? std::filesystem::path(model_path).filename().string() : attach;
  // KV a decode step reads at the end of the run: every layer's K and V of every position.
  const uint64_t kv_bytes = static_cast<uint64_t>(prompt_len + gen) * 2 * static_cast<uint64_t>(config.n_layers) *
                            static_cast<uint64_t>(config.kv_dim()) * static_cast<uint64_t>(kernels::kv_dtype_bytes(*kv_dtype));
  std::printf("{\"model\":\"%s\",\"harness\":\"hearth\",\"cpu\":\"%s\",\"prefetch\":%d,\"isa\":\"%s\",\"threads\":%d,\"n_prompt\":%d,\"n_gen\":%d,"
              "\"kv_dtype\":\"%s\",\"weight_bytes_per_token\":%llu,\"kv_bytes_last_token\":%llu,\"prefill_tok_s\":%.2f,"
              "\"decode_tok_s\":%.3f,\"load_s\":%.3f,\"first_ids\":[",
              name.c_str(), kernels::cpu::cpu_host_summary().c_str(), kernels::cpu::weight_prefetch_bytes(),
              std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())).c_str(),
              backend_options.threads == 0 ? default_thread_count() : backend_options.threads, prompt_len, gen,
              kernels::kv_dtype_name(*kv_dtype), static_cast<unsigned long long>(weight_bytes),
              static_cast<unsigned long long>(kv_bytes), prompt_len / run->prefill_seconds, gen / run->decode_seconds,
              load_s);
  for (size_t i = 0; i < 16 && i < run->tokens.size(); ++i) std::printf("%s%d", i ? "," : "", run->tokens[i]);
  std::printf("]}\n");
  return 0;
}
