// `hearth quantize`: GPTQ (or round-to-nearest) of a model's linear layers, written as a
// GGUF file the loader serves.
#include <sys/resource.h>

#include <cstdio>
#include <string>

#include "common/args.h"
#include "common/mapped_file.h"
#include "common/process.h"
#include "loader/model.h"
#include "quant/quantize_model.h"
#include "tools/commands.h"
#include "tools/model_source.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth quantize MODEL --out FILE.gguf|DIR [options]

Quantizes every linear layer of MODEL group-wise, and writes either a GGUF file whose
Q4_0 (4-bit) or Q8_0 (8-bit) blocks hold exactly the quantized values (from a GGUF
model; token embeddings, LM head and norms as stored), or a Hugging Face GPTQ directory
(qweight, qzeros, scales, g_idx in AutoGPTQ's packing; from a Hugging Face model
directory, whose other tensors, config and tokenizer it keeps). A mixture of experts
(Qwen3-MoE, Qwen2-MoE, Mixtral) is written as a Hugging Face GPTQ directory: each
expert's matrices calibrated on the tokens routed to it, the router kept as stored.

  --out FILE.gguf|DIR     a .gguf file (replaced only when the run succeeds), or a new or
                          empty directory for the Hugging Face GPTQ checkpoint
  --method gptq|rtn       GPTQ with calibration data (default), or round-to-nearest
  --bits 4|8              bits per weight (default 4)
  --group-size N          columns sharing a scale: 32, 64, 128 (default 128), any
                          multiple of 32
  --sym                   symmetric grid (default)
  --asym                  asymmetric grid (Hugging Face output only: GGUF blocks are symmetric)
  --act-order             GPTQ: quantize columns by decreasing Hessian diagonal
  --static-groups         with --act-order: groups stay in column order, so the output
                          carries no column orders (GGUF: no .perm tensors, which other
                          GGUF readers do not know)
  --calibration FILE      text (.txt) or JSON lines ({"text": ...} per line, .jsonl)
  --samples N             calibration sequences (default 64)
  --seq-len L             tokens per sequence (default 256, at most the model's context)
  --damp X                fraction of the Hessian's mean diagonal added to it (default 0.01)
  --skip-indivisible      keep matrices that cannot be quantized as asked (inputs not whole
                          groups; for GPTQ directories, outputs not whole packed words)
                          unquantized instead of failing
  --threads N             cores to use (default: all)
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth quantize: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

// The most resident memory this process has held, in bytes.
double peak_rss_bytes() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

int fail(const Status& status) {
  std::fprintf(stderr, "hearth quantize: %s\n", status.to_string().c_str());
  return 1;
}

}  // namespace

int quantize_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv,
                          {"model", "out", "method", "bits", "group-size", "calibration", "samples", "seq-len", "damp",
                           "threads"},
                          {"help", "sym", "asym", "act-order", "static-groups", "skip-indivisible"}, true);
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  auto model_arg = model_argument(*args);
  if (!model_arg.is_ok()) return usage_error(model_arg.status().message());
  const std::string model_path = *model_arg;
  const std::filesystem::path out = args->get("out").value_or("");
  if (out.empty()) return usage_error("give --out FILE.gguf or --out DIR");

  quant::ModelQuantOptions o;
  o.output = out.extension() == ".gguf" ? quant::OutputFormat::kGguf : quant::OutputFormat::kHfGptq;
  const std::string method = args->get("method").value_or("gptq");
  if (method != "gptq" && method != "rtn") return usage_error("--method must be gptq or rtn");
  o.method = method == "gptq" ? quant::Method::kGptq : quant::Method::kRtn;
  struct IntFlag {
    const char* name;
    int64_t min, max;
    int64_t fallback;
  };
  int64_t values[5];
  const IntFlag flags[] = {{"bits", 4, 8, 4},       {"group-size", 32, 4096, 128}, {"samples", 1, 1 << 20, 64},
                           {"seq-len", 2, 1 << 20, 256}, {"threads", 1, 1024, 0}};
  for (size_t i = 0; i < std::size(flags); ++i) {
    auto v = args->get_int(flags[i].name, flags[i].min, flags[i].max);
    if (!v.is_ok()) return usage_error(v.status().message());
    values[i] = v->value_or(flags[i].fallback);
  }
  o.scheme.bits = static_cast<int32_t>(values[0]);
  o.scheme.group_size = static_cast<int32_t>(values[1]);
  const auto samples = static_cast<int32_t>(values[2]);
  auto seq_len = static_cast<int32_t>(values[3]);
  o.threads = static_cast<int>(values[4]);
  if (args->has("sym") && args->has("asym")) return usage_error("give --sym or --asym, not both");
  o.scheme.sym = !args->has("asym");
  o.scheme.act_order = args->has("act-order");
  o.scheme.static_groups = args->has("static-groups");
  auto damp = args->get_double("damp");
  if (!damp.is_ok()) return usage_error(damp.status().message());
  o.damp = damp->value_or(0.01);
  o.skip_indivisible = args->has("skip-indivisible");
  if (Status st = quant::scheme_check(o.scheme); !st.is_ok()) return usage_error(st.message());
  if (!(o.damp > 0.0) || o.damp > 1.0) return usage_error("--damp must be in (0, 1]");
  const std::string calibration_path = args->get("calibration").value_or("");
  if (o.method == quant::Method::kGptq && calibration_path.empty()) {
    return usage_error("--method gptq needs --calibration FILE");
  }
  if (o.method == quant::Method::kRtn && (!calibration_path.empty() || args->has("samples") || args->has("seq-len") ||
                                          args->has("damp"))) {
    return usage_error("--method rtn takes no calibration (--calibration, --samples, --seq-len, --damp)");
  }

  auto model = model_open(model_path);
  if (!model.is_ok()) return fail(model.status());
  if (Status st = quant::quantize_check(*model, o); !st.is_ok()) return fail(st);

  std::vector<std::vector<TokenId>> calibration;
  if (o.method == quant::Method::kGptq) {
    seq_len = std::min(seq_len, model->config.max_context);
    auto text = read_small_file(calibration_path, size_t{1} << 30);
    if (!text.is_ok()) return fail(text.status().with_context("--calibration"));
    auto tokenizer = tokenizer_load(model->tokenizer);
    if (!tokenizer.is_ok()) return fail(tokenizer.status().with_context("tokenizer"));
    const std::string ext = std::filesystem::path(calibration_path).extension().string();
    auto windows = quant::calibration_samples(**tokenizer, *text, ext == ".jsonl" || ext == ".json", samples, seq_len);
    if (!windows.is_ok()) return fail(windows.status());
    calibration = std::move(windows).value();
  }

  std::fprintf(stderr, "hearth quantize: %s, %s, %s%s\n", model_path.c_str(),
               std::string(quant::method_name(o.method)).c_str(), quant::scheme_name(o.scheme).c_str(),
               o.method == quant::Method::kGptq
                   ? fmt::format(", {} samples of {} tokens", calibration.size(), seq_len).c_str()
                   : "");
  auto progress = [](int32_t layer, int32_t n_layers, double seconds) {
    std::fprintf(stderr, "hearth quantize: layer %d/%d done in %.2f s\n", layer + 1, n_layers, seconds);
  };
  auto quantized = quant::quantize_model(*model, calibration, o, progress);
  if (!quantized.is_ok()) return fail(quantized.status());
  for (const std::string& name : quantized->kept) {
    std::fprintf(stderr, "hearth quantize: %s kept unquantized (its size does not fit the groups)\n",
                 name.c_str());
  }
  if (!quantized->unobserved.empty()) {
    std::fprintf(stderr,
                 "hearth quantize: %zu expert matrices (e.g. %s) saw no calibration token and were rounded to "
                 "nearest; more or longer --samples reach more experts\n",
                 quantized->unobserved.size(), quantized->unobserved.front().c_str());
  }
  const Status written = o.output == quant::OutputFormat::kGguf
                             ? quant::write_quantized_gguf(*model, *quantized, out)
                             : quant::write_quantized_hf(*model, *quantized, o, model_path, out);
  if (!written.is_ok()) return fail(written);
  std::error_code ec;
  uint64_t bytes = 0;
  if (std::filesystem::is_directory(out, ec)) {
    for (const auto& f : std::filesystem::directory_iterator(out, ec)) bytes += f.is_regular_file() ? f.file_size() : 0;
  } else {
    bytes = std::filesystem::file_size(out, ec);
  }
  std::fprintf(stderr,
               "hearth quantize: wrote %s (%.1f MiB): %zu matrices quantized in %.1f s; peak working set: Hessians "
               "%.1f MiB, calibration hidden states %.1f MiB, peak RSS %.1f MiB\n",
               out.c_str(), static_cast<double>(bytes) / (1 << 20), quantized->matrices.size(), quantized->seconds,
               static_cast<double>(quantized->hessian_bytes) / (1 << 20),
               static_cast<double>(quantized->hidden_bytes) / (1 << 20), peak_rss_bytes() / (1 << 20));
  return 0;
}

}  // namespace hearth::cli
