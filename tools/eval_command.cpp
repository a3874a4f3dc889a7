// `hearth eval`: perplexity of a model over a text and, against a reference model, the
// KL divergence and top-1 agreement of its next-token distributions.
#include <unistd.h>

#include <cstdio>
#include <string>

#include <boost/json.hpp>

#include "common/args.h"
#include "common/mapped_file.h"
#include "quant/eval.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth eval MODEL --text FILE [options]

Scores MODEL on a text as llama.cpp's perplexity tool does (chunks of --ctx tokens, each
starting with BOS; the second half of each chunk is scored) and, with --reference, how
far its next-token distributions are from the reference model's. Every figure comes with
its 95% confidence interval.

  --text FILE             UTF-8 text to score
  --reference MODEL       a model with the same vocabulary (e.g. the unquantized one)
  --ctx N                 tokens per chunk (default 512, at most the model's context)
  --chunks N              score at most N chunks (default: every whole chunk)
  --tokenizer PATH        tokenizer for containers that keep it apart
  --threads N             cores to use (default: all)
  --json                  print one JSON object instead of the table
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth eval: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

int fail(const Status& status) {
  std::fprintf(stderr, "hearth eval: %s\n", status.to_string().c_str());
  return 1;
}

boost::json::object estimate_json(const quant::Estimate& e) { return {{"mean", e.mean}, {"low", e.low}, {"high", e.high}}; }

}  // namespace

int eval_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv, {"model", "text", "reference", "ctx", "chunks", "tokenizer", "threads"},
                          {"help", "json"}, true);
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto model_arg = model_argument(*args);
  if (!model_arg.is_ok()) return usage_error(model_arg.status().message());
  const std::string model_path = *model_arg;
  const std::string text_path = args->get("text").value_or("");
  if (text_path.empty()) return usage_error("give --text FILE");
  auto ctx = args->get_int("ctx", 4, 1 << 20);
  auto chunks = args->get_int("chunks", 1, 1 << 30);
  auto threads = args->get_int("threads", 1, 1024);
  for (const auto* v : {&ctx, &chunks, &threads}) {
    if (!v->is_ok()) return usage_error(v->status().message());
  }
  const std::filesystem::path tokenizer_path = args->get("tokenizer").value_or("");

  auto model = open_model_files(model_path, tokenizer_path);
  if (!model.is_ok()) return fail(model.status());
  std::optional<RunnableModel> reference;
  if (auto ref_path = args->get("reference")) {
    auto r = open_model_files(*ref_path, tokenizer_path);
    if (!r.is_ok()) return fail(r.status().with_context("--reference"));
    reference = std::move(r).value();
  }
  auto text = read_small_file(text_path, size_t{1} << 30);
  if (!text.is_ok()) return fail(text.status().with_context("--text"));
  auto tokens = model->tokenizer->encode(*text, {false, false});
  if (!tokens.is_ok()) return fail(tokens.status().with_context("--text"));

  quant::EvalOptions o;
  o.ctx = static_cast<int32_t>(ctx->value_or(std::min(512, model->config.max_context)));
  o.max_chunks = static_cast<int32_t>(chunks->value_or(0));
  o.bos = model->tokenizer->bos_id();
  const int n_threads = static_cast<int>(threads->value_or(0));
  auto scorer = quant::SequenceScorer::create(model->config, model->tensors, model->layout, o.ctx, n_threads);
  if (!scorer.is_ok()) return fail(scorer.status());
  std::unique_ptr<quant::SequenceScorer> ref_scorer;
  if (reference) {
    auto s = quant::SequenceScorer::create(reference->config, reference->tensors, reference->layout, o.ctx, n_threads);
    if (!s.is_ok()) return fail(s.status().with_context("--reference"));
    ref_scorer = std::move(s).value();
  }
  const bool json = args->has("json");
  const bool show_progress = !json && ::isatty(STDERR_FILENO) == 1;
  auto progress = [&](int32_t done, int32_t total) {
    if (!show_progress) return;
    std::fprintf(stderr, "\rhearth eval: chunk %d/%d", done, total);
    if (done == total) std::fputc('\n', stderr);
  };
  auto r = quant::evaluate(**scorer, ref_scorer.get(), *tokens, o, progress);
  if (!r.is_ok()) return fail(r.status());

  if (json) {
    boost::json::object out{{"model", model_path},      {"text", text_path},       {"tokens", tokens->size()},
                            {"ctx", r->ctx},            {"chunks", r->chunks},     {"scored", r->scored},
                            {"perplexity", estimate_json(r->perplexity)},          {"seconds", r->seconds}};
    if (r->has_reference) {
      out["reference"] = args->get("reference").value_or("");
      out["reference_perplexity"] = estimate_json(r->reference_perplexity);
      out["kl_divergence"] = estimate_json(r->kl);
      out["kl_max"] = r->kl_max;
      out["top1_agreement"] = estimate_json(r->top1);
    }
    std::printf("%s\n", boost::json::serialize(out).c_str());
    return 0;
  }
  std::printf("%s on %s: %d chunks of %d tokens, %lld positions scored in %.1f s\n", model_path.c_str(),
              text_path.c_str(), r->chunks, r->ctx, static_cast<long long>(r->scored), r->seconds);
  auto row = [](const char* what, const quant::Estimate& e, double scale, const char* unit) {
    std::printf("  %-22s %.6g%s  (95%%: %.6g .. %.6g)\n", what, e.mean * scale, unit, e.low * scale, e.high * scale);
  };
  row("perplexity", r->perplexity, 1.0, "");
  if (r->has_reference) {
    row("reference perplexity", r->reference_perplexity, 1.0, "");
    row("KL divergence (nats)", r->kl, 1.0, "");
    std::printf("  %-22s %.6g\n", "KL divergence, max", r->kl_max);
    row("top-1 agreement", r->top1, 100.0, "%");
  }
  return 0;
}

}  // namespace hearth::cli
