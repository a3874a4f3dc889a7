// What constrained decoding costs per decode step on a real model: the same driver steps
// (one sequence, sampled at temperature 1) with and without a JSON schema, the grammar's
// mask computed over the model's whole vocabulary each step. A constrained sequence that
// completes its JSON is followed by another until both runs have produced the same
// number of tokens. Prints the mean step times and their ratio, and the matcher's cache
// figures.
//
//   constrained_bench --model M.gguf [--threads N] [--gen 128] [--schema JSON]
//
// The 1B figure of the issue: hearth synth --preset 1b --type q4_0 --gguf 1b.gguf, then
// constrained_bench --model 1b.gguf.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <boost/json.hpp>

#include "common/args.h"
#include "engine/core/driver.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/thread_pool.h"
#include "grammar/json_schema.h"
#include "kernels/cpu/isa.h"
#include "tools/model_source.h"

namespace {

using namespace hearth;

int fail(const Status& s) {
  std::fprintf(stderr, "constrained_bench: %s\n", s.to_string().c_str());
  return 1;
}

constexpr const char* kDefaultSchema = R"({"type": "object", "properties": {"name": {"type": "string"},
    "age": {"type": "integer", "minimum": 0, "maximum": 150}, "email": {"type": "string", "format": "email"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}, "address": {"type": "object",
    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}, "required": ["street", "city"]}},
    "required": ["name", "age", "tags", "address"]})";

struct Run {
  double step_ms = 0;  // mean over decode steps
  int tokens = 0;
  int sequences = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> argv_s(argv + 1, argv + argc);
  auto args = Args::parse(argv_s, {"model", "threads", "gen", "schema"}, {});
  if (!args.is_ok()) return fail(args.status());
  if (!args->get("model")) {
    std::fprintf(stderr, "usage: constrained_bench --model M.gguf [--threads N] [--gen 128] [--schema JSON]\n");
    return 2;
  }
  auto threads = args->get_int("threads", 1, 256);
  auto gen_flag = args->get_int("gen", 8, 4096);
  if (!threads.is_ok()) return fail(threads.status());
  if (!gen_flag.is_ok()) return fail(gen_flag.status());
  const int gen = static_cast<int>(gen_flag->value_or(128));
  auto source = cli::open_model_files(*args->get("model"), {});
  if (!source.is_ok()) return fail(source.status());
  const ModelConfig& config = source->config;
  CpuBackendOptions bo;
  bo.threads = static_cast<int>(threads->value_or(0));
  auto backend = make_cpu_backend(bo);
  const int32_t context = std::min(config.max_context, gen + 64);
  auto cache = KvCache::create(*backend, {config.n_layers, config.kv_dim(), 16, (context + 15) / 16 * 2});
  if (!cache.is_ok()) return fail(cache.status());
  auto model = Model::create(config, source->tensors, *backend, 64, {.layout = source->layout});
  if (!model.is_ok()) return fail(model.status());
  ModelRunner runner(**model, *cache);

  const Tokenizer& tok = *source->tokenizer;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> bytes;
  for (TokenId id = 0; id < config.vocab_size; ++id) bytes.emplace_back(id < tok.vocab_size() ? tok.token_bytes(id) : "");
  auto vocab = std::make_shared<const grammar::Vocabulary>(std::move(grammar::Vocabulary::build(bytes)).value());
  const double vocab_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  auto gbnf = grammar::json_schema_to_gbnf(boost::json::parse(args->get("schema").value_or(kDefaultSchema)));
  if (!gbnf.is_ok()) return fail(gbnf.status());

  DriverConfig dc{.scheduler = {.max_batch_size = 1, .max_batched_tokens = 64}, .max_sequence_tokens = context};
  dc.vocabulary = [vocab]() -> Result<std::shared_ptr<const grammar::Vocabulary>> { return vocab; };
  auto prompt = tok.encode("Here is a person as JSON:");
  if (!prompt.is_ok()) return fail(prompt.status());
  const auto n_prompt = static_cast<int32_t>(prompt->size());

  auto measure = [&](bool constrained) -> Result<Run> {
    cache->blocks() = BlockAllocator(cache->config().n_blocks);  // what a previous run left
    Driver driver(runner, dc);
    Run r;
    double decode_s = 0;
    int decode_steps = 0;
    uint64_t id = 0;
    while (r.tokens < gen) {
      if (driver.idle()) {
        SequenceRequest q{.tokens = *prompt, .n_prompt = n_prompt, .spec = {.sampling = {.temperature = 1.0f, .seed = 7 + id}, .max_tokens = gen - r.tokens, .ignore_stop = !constrained}};
        q.spec.stop_ids = tok.stop_ids();
        if (constrained) q.spec.grammar = *gbnf;
        HEARTH_RETURN_IF_ERROR(driver.add(++id, std::move(q)).status());
        ++r.sequences;
        std::vector<StepEvent> events;  // the prefill step is not a decode step
        bool ran = false;
        HEARTH_RETURN_IF_ERROR(driver.step(events, ran));
        r.tokens += static_cast<int>(events.size());
        continue;
      }
      std::vector<StepEvent> events;
      bool ran = false;
      const auto s = std::chrono::steady_clock::now();
      HEARTH_RETURN_IF_ERROR(driver.step(events, ran));
      decode_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - s).count();
      ++decode_steps;
      for (const StepEvent& e : events) {
        if (e.finish == FinishReason::kError) return e.error;
        ++r.tokens;
      }
    }
    r.step_ms = decode_steps ? decode_s * 1000.0 / decode_steps : 0;
    return r;
  };
  // One untimed warm-up of each, then the measured runs.
  if (auto w = measure(false); !w.is_ok()) return fail(w.status());
  auto plain = measure(false);
  if (!plain.is_ok()) return fail(plain.status());
  auto constrained = measure(true);
  if (!constrained.is_ok()) return fail(constrained.status());
  std::printf("{\"model\":\"%s\",\"cpu\":\"%s\",\"isa\":\"%s\",\"threads\":%d,\"vocab\":%d,\"vocab_build_ms\":%.1f,\"tokens\":%d,"
              "\"step_ms_unconstrained\":%.2f,\"step_ms_constrained\":%.2f,\"ratio\":%.3f,\"constrained_sequences\":%d}\n",
              args->get("model")->c_str(), kernels::cpu::cpu_host_summary().c_str(),
              std::string(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa())).c_str(),
              bo.threads == 0 ? default_thread_count() : bo.threads, config.vocab_size, vocab_ms, gen, plain->step_ms,
              constrained->step_ms, constrained->step_ms / plain->step_ms, constrained->sequences);
  return 0;
}
