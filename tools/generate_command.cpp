// `hearth generate`: run a model in this process from a prompt to finished text.
#include <cstdio>
#include <optional>
#include <string>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/log.h"
#include "common/process.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/core/draft_proposer.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/serve/loader_slab.h"
#include "ipc/segment.h"
#include "loader/lora.h"
#include "tokenizer/tokenizer.h"
#include "ipc/weights_segment.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth generate --model PATH --prompt TEXT [options]

Runs a model in this process and prints the prompt followed by the generated text.

  --model PATH            GGUF file, Hugging Face directory or llama2.c .bin checkpoint
  --attach INSTANCE       use the resident weights of a running hearth-loader instead
  --shm-dir DIR           where --attach finds segments (default $HEARTH_SHM_DIR or /dev/shm)
  --backend cpu|cuda[:N]  the device to run on (default cpu); with --attach and cuda, the
                          weights come from the loader's device slab (hearth-loader --device)
  --prompt TEXT           the prompt
  --tokenizer PATH        tokenizer file or directory, for containers that keep it apart
  --max-tokens N          tokens to generate at most (default 256)
  --temperature T         0 is greedy (default 0)
  --top-k K               keep the K most likely tokens (default 0: off)
  --top-p P               nucleus sampling threshold (default 1: off)
  --min-p P               drop tokens below P times the top probability (default 0: off)
  --repetition-penalty R  > 1 discourages repeating prompt and output tokens (default 1)
  --presence-penalty X    subtracted from tokens already generated (default 0)
  --frequency-penalty X   subtracted per occurrence in the output (default 0)
  --seed S                random seed for sampling (default 0)
  --ctx N                 context length to allocate (default: the model's, at most 4096)
  --kv-dtype f32|f16|bf16 how the KV cache stores keys and values (default f16)
  --ignore-eos            keep generating past end-of-sequence tokens (benchmarks)
  --spec ngram|draft|none  speculative decoding: the same tokens in fewer steps, drafted by
                          prompt lookup (ngram: where the text repeats itself) or by a
                          smaller model of the same tokenizer (draft) (default none)
  --draft-model PATH      the draft model for --spec draft (files, in --model's formats); with
                          --attach, the instance's own (hearth-loader --draft-model) instead
  --spec-tokens K         drafted tokens per step at most, 1..16 (default 4)
  --lora PATH             run with a LoRA adapter: a PEFT directory (adapter_config.json,
                          adapter_model.safetensors) or a GGUF LoRA file
  --no-special            do not add BOS/EOS to the prompt
  --json                  print one JSON object (ids, text, finish reason, speeds, the time
                          to ready and its stages in ready_split_ms) instead
)";

int fail(const Status& status) {
  std::fprintf(stderr, "hearth generate: %s\n", status.to_string().c_str());
  return 1;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth generate: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

struct Options {
  std::string model;
  std::string attach;
  std::string shm_dir;
  std::string prompt;
  std::string tokenizer;
  std::string backend{"cpu"};
  std::string draft_model;
  std::string lora;
  int32_t context = 0;
  KvDType kv_dtype = KvDType::kF16;
  bool json = false;
  bool add_special = true;
  GenerateOptions gen;
};

Result<Options> parse_options(const std::vector<std::string>& argv) {
  HEARTH_ASSIGN_OR_RETURN(
      Args args, Args::parse(argv,
                             {"model", "attach", "shm-dir", "backend", "prompt", "tokenizer", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                              "repetition-penalty", "presence-penalty", "frequency-penalty", "seed", "ctx", "kv-dtype", "spec",
                              "spec-tokens", "draft-model", "lora"},
                             {"ignore-eos", "json", "no-special", "help"}));
  Options o;
  if (args.has("help")) return make_error(ErrorCode::kInvalidArgument, "help");
  if (args.has("model") == args.has("attach")) {
    return make_error(ErrorCode::kInvalidArgument, "--model is required (or --attach INSTANCE instead)");
  }
  if (!args.get("prompt")) return make_error(ErrorCode::kInvalidArgument, "--prompt is required");
  o.model = args.get("model").value_or("");
  o.attach = args.get("attach").value_or("");
  o.shm_dir = args.get("shm-dir").value_or("");
  o.prompt = *args.get("prompt");
  o.tokenizer = args.get("tokenizer").value_or("");
  o.backend = args.get("backend").value_or("cpu");
  HEARTH_RETURN_IF_ERROR(backend_check_name(o.backend));
  o.json = args.has("json");
  o.add_special = !args.has("no-special");
  o.gen.spec.ignore_stop = args.has("ignore-eos");
  o.gen.spec.sampling.temperature = 0.0f;
  HEARTH_ASSIGN_OR_RETURN(auto max_tokens, args.get_int("max-tokens", 0, 1 << 24));
  o.gen.spec.max_tokens = static_cast<int32_t>(max_tokens.value_or(256));
  HEARTH_ASSIGN_OR_RETURN(auto ctx, args.get_int("ctx", 1, 1 << 24));
  o.context = static_cast<int32_t>(ctx.value_or(0));
  if (auto name = args.get("kv-dtype")) {
    HEARTH_ASSIGN_OR_RETURN(o.kv_dtype, kv_dtype_from_name(*name));
  }
  HEARTH_ASSIGN_OR_RETURN(auto top_k, args.get_int("top-k", 0, 1 << 22));
  o.gen.spec.sampling.top_k = static_cast<int32_t>(top_k.value_or(0));
  HEARTH_ASSIGN_OR_RETURN(auto seed, args.get_int("seed", 0, INT64_MAX));
  o.gen.spec.sampling.seed = static_cast<uint64_t>(seed.value_or(0));
  struct FloatFlag {
    const char* name;
    float* target;
  };
  for (const FloatFlag& f : {FloatFlag{"temperature", &o.gen.spec.sampling.temperature},
                             FloatFlag{"top-p", &o.gen.spec.sampling.top_p}, FloatFlag{"min-p", &o.gen.spec.sampling.min_p},
                             FloatFlag{"repetition-penalty", &o.gen.spec.sampling.repetition_penalty},
                             FloatFlag{"presence-penalty", &o.gen.spec.sampling.presence_penalty},
                             FloatFlag{"frequency-penalty", &o.gen.spec.sampling.frequency_penalty}}) {
    HEARTH_ASSIGN_OR_RETURN(auto v, args.get_double(f.name));
    if (v) *f.target = static_cast<float>(*v);
  }
  HEARTH_RETURN_IF_ERROR(sampling_params_validate(o.gen.spec.sampling));
  if (auto method = args.get("spec")) {
    HEARTH_ASSIGN_OR_RETURN(o.gen.speculative.method, spec_method_from_name(*method));
  }
  HEARTH_ASSIGN_OR_RETURN(auto spec_tokens, args.get_int("spec-tokens", 1, kMaxSpecTokens));
  if (spec_tokens) o.gen.speculative.max_tokens = static_cast<int32_t>(*spec_tokens);
  HEARTH_RETURN_IF_ERROR(spec_config_validate(o.gen.speculative));
  o.draft_model = args.get("draft-model").value_or("");
  o.lora = args.get("lora").value_or("");
  const bool draft = o.gen.speculative.method == SpecMethod::kDraft;
  if (!o.draft_model.empty() && !draft) return make_error(ErrorCode::kInvalidArgument, "--draft-model needs --spec draft");
  if (draft && o.draft_model.empty() && o.attach.empty()) {
    return make_error(ErrorCode::kInvalidArgument, "--spec draft needs --draft-model PATH (or --attach an instance with one)");
  }
  return o;
}

}  // namespace

int generate_command(const std::vector<std::string>& argv, double started_at) {
  // Where the time to ready goes (--json's ready_split_ms): exec and start-up to here, then
  // each stage.
  boost::json::object split;
  double stage_at = monotonic_seconds();
  split["start"] = (stage_at - started_at) * 1e3;
  auto stage = [&](const char* name) {
    const double now = monotonic_seconds();
    split[name] = (now - stage_at) * 1e3;
    stage_at = now;
  };
  auto parsed = parse_options(argv);
  if (!parsed.is_ok()) {
    if (parsed.status().message() == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    return usage_error(parsed.status().message());
  }
  Options& o = parsed.value();

  // The CPU backend runs the layout hearth-loader publishes; other backends the files' own.
  const std::string_view layout = o.backend == "cpu" ? kLayoutCpuR16 : kLayoutPlain;
  auto source = o.attach.empty() ? open_model_files(o.model, o.tokenizer, layout)
                                 : attach_instance(o.attach, o.shm_dir);
  if (!source.is_ok()) return fail(source.status());
  RunnableModel& model = source.value();
  const Tokenizer& tok = *model.tokenizer;
  HEARTH_LOG_INFO("{}: {}", model.name, model_config_summary(model.config));
  stage(o.attach.empty() ? "open_files" : "attach");

  auto made = make_backend(o.backend, {});
  if (!made.is_ok()) return fail(made.status());
  std::unique_ptr<Backend> backend = std::move(made).value();
  if (model.attached) {
    const std::filesystem::path dir = o.shm_dir.empty() ? shm_dir_default() : std::filesystem::path(o.shm_dir);
    if (Status st = backend_use_loader_slab(*backend, *model.attached, 0, dir, o.attach); !st.is_ok()) return fail(st);
  }
  stage("backend");
  const ModelConfig& config = model.config;
  const int32_t context = std::min(config.max_context, o.context > 0 ? o.context : 4096);
  constexpr int32_t kBlockSize = 16;
  auto cache = KvCache::create(*backend, {config.n_layers, config.kv_dim(), kBlockSize,
                                          (context + kBlockSize - 1) / kBlockSize, o.kv_dtype});
  if (!cache.is_ok()) return fail(cache.status());
  stage("kv_cache");
  std::optional<LoraAdapter> adapter;
  if (!o.lora.empty()) {
    auto opened = lora_open(o.lora, config, model.tensors);
    if (!opened.is_ok()) return fail(opened.status());
    adapter.emplace(std::move(opened).value());
  }
  auto llama = Model::create(config, model.tensors, *backend, std::min(context, 512),
                             {.layout = model.layout,
                              .max_adapters = adapter ? 1 : 0,
                              .max_lora_rank = adapter ? adapter->max_rank : 0});
  if (!llama.is_ok()) return fail(llama.status());
  stage("model");
  if (adapter) {
    if (Status st = (*llama)->set_adapter(0, *adapter); !st.is_ok()) return fail(st);
    o.gen.adapter = 0;
    HEARTH_LOG_INFO("LoRA adapter {}: {} matrices, rank {}", adapter->name, adapter->matrices.size(), adapter->max_rank);
  }
  // The draft model, its own cache as large as the target's.
  std::optional<RunnableModel> draft_source;
  std::unique_ptr<Model> draft;
  std::optional<KvCache> draft_cache;
  if (o.gen.speculative.method == SpecMethod::kDraft) {
    auto opened = o.draft_model.empty() ? attach_instance(o.attach, o.shm_dir, "draft-weights")
                                        : open_model_files(o.draft_model, {}, layout);
    if (!opened.is_ok()) {
      return fail(opened.status().with_context(o.draft_model.empty()
                                                   ? "the draft model (hearth-loader --draft-model PATH keeps one for the "
                                                     "instance; or give --draft-model PATH)"
                                                   : "the draft model"));
    }
    draft_source.emplace(std::move(opened).value());
    const ModelConfig& dc = draft_source->config;
    auto table = [](const Tokenizer& t) {
      std::vector<std::string> tokens;
      for (TokenId id = 0; id < t.vocab_size(); ++id) tokens.emplace_back(t.token_bytes(id));
      return tokens;
    };
    if (Status st = draft_tokens_check(table(tok), table(*draft_source->tokenizer)); !st.is_ok()) return fail(st);
    if (Status st = draft_model_check(config, dc, context); !st.is_ok()) return fail(st);
    auto made_cache = KvCache::create(*backend, {dc.n_layers, dc.kv_dim(), kBlockSize, cache->config().n_blocks, o.kv_dtype});
    if (!made_cache.is_ok()) return fail(made_cache.status().with_context("the draft model's KV cache"));
    draft_cache.emplace(std::move(made_cache).value());
    auto made_model = Model::create(dc, draft_source->tensors, *backend, std::min(context, 512),
                                    {.layout = draft_source->layout});
    if (!made_model.is_ok()) return fail(made_model.status().with_context("the draft model"));
    draft = std::move(made_model).value();
    o.gen.draft_model = draft.get();
    o.gen.draft_cache = &*draft_cache;
    HEARTH_LOG_INFO("draft model {}: {}", draft_source->name, model_config_summary(dc));
  }
  stage("rest");
  const double ready_seconds = monotonic_seconds() - started_at;

  auto prompt_ids = tok.encode(o.prompt, EncodeOptions{o.add_special, true});
  if (!prompt_ids.is_ok()) return fail(prompt_ids.status().with_context("prompt"));
  o.gen.spec.stop_ids = tok.stop_ids();
  o.gen.context = context;

  IncrementalDetokenizer detok(tok, /*at_start=*/false);
  std::string text;
  if (!o.json) {
    std::fwrite(o.prompt.data(), 1, o.prompt.size(), stdout);
    std::fflush(stdout);
  }
  double first_token_seconds = 0.0;
  auto on_token = [&](const TokenResult& t) {
    if (first_token_seconds == 0.0) first_token_seconds = monotonic_seconds() - started_at;
    std::string piece = detok.push(t.id);
    text += piece;
    if (!o.json && !piece.empty()) {
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  };
  auto result = generate(**llama, *cache, *prompt_ids, o.gen, on_token);
  if (!result.is_ok()) return fail(result.status());
  const std::string tail = detok.finish();
  text += tail;

  const double prefill_tps = result->prefill_seconds > 0 ? result->prompt_tokens / result->prefill_seconds : 0.0;
  const double decode_tps =
      result->decode_seconds > 0 ? static_cast<double>(result->tokens.size() - 1) / result->decode_seconds : 0.0;
  if (o.json) {
    boost::json::object out;
    out["model"] = model.name;
    out["source"] = o.attach.empty() ? "files" : "attached";
    out["prompt"] = o.prompt;
    boost::json::array prompt_json, ids_json;
    for (TokenId id : *prompt_ids) prompt_json.push_back(id);
    for (TokenId id : result->tokens) ids_json.push_back(id);
    out["prompt_ids"] = std::move(prompt_json);
    out["ids"] = std::move(ids_json);
    out["text"] = text;
    out["finish_reason"] = std::string(finish_reason_name(result->finish));
    out["prompt_tokens"] = result->prompt_tokens;
    out["generated_tokens"] = result->tokens.size();
    out["ready_seconds"] = ready_seconds;
    out["ready_split_ms"] = split;
    out["first_token_seconds"] = first_token_seconds;
    out["prefill_tokens_per_second"] = prefill_tps;
    out["decode_tokens_per_second"] = decode_tps;
    if (o.gen.speculative.method != SpecMethod::kNone) {
      out["spec_draft_tokens"] = result->spec.draft_tokens;
      out["spec_accepted_tokens"] = result->spec.accepted;
    }
    const std::string s = boost::json::serialize(out);
    std::printf("%s\n", s.c_str());
  } else {
    std::fwrite(tail.data(), 1, tail.size(), stdout);
    std::fputc('\n', stdout);
    HEARTH_LOG_INFO("{} prompt tokens, {} generated ({}), prefill {:.1f} tok/s, decode {:.1f} tok/s{}",
                    result->prompt_tokens, result->tokens.size(), finish_reason_name(result->finish), prefill_tps,
                    decode_tps,
                    result->spec.draft_tokens == 0
                        ? std::string()
                        : fmt::format(", speculation kept {} of {} drafted tokens", result->spec.accepted,
                                      result->spec.draft_tokens));
  }
  return 0;
}

}  // namespace hearth::cli
