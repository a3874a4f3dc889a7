// `hearth synth`: write a model of a named family and shape with seeded random weights.
#include <cstdio>

#include "common/args.h"
#include "common/process.h"
#include "loader/synth.h"
#include "tools/commands.h"

namespace hearth::cli {
namespace {

constexpr const char* kUsage = R"(usage: hearth synth [--arch A] [--preset tiny|1b|7b] [shape flags] --gguf FILE [--hf DIR]

Writes a model with seeded pseudo-random weights, the same weights in both containers
(for llama, the same as ../shared/tools/peer/make_model.py for the same shape and seed).

  --arch A             llama (default), qwen3, gptneox, gptj, qwen3moe, qwen2moe, glm4moe,
                       mixtral, gemma2, gemma3
  --experts N --experts-used K
                       a mixture of experts' experts and experts per token (default 8, 2;
                       each expert's FFN is --hidden)
  --shared-hidden N    qwen2moe's shared expert's FFN (default 2 * --hidden)

  --preset NAME        tiny (default), 1b (dim 2048, ffn 8192, 16 layers, 32/8 heads,
                       vocab 32000), 7b (Llama-2-7B shape), 1b-moe (with --arch qwen3moe,
                       qwen2moe, glm4moe or mixtral: 24 layers of 32 experts of 1024, 4 per token, ~1B active)
  --dim N --hidden N --layers N --heads N --kv-heads N --vocab N --ctx N --rope-theta X
                       override the preset's shape
  --type T             GGUF type of the 2-D tensors: f32, f16 (default), q8_0, q4_0
  --seed S             generator seed (default 1234)
  --gguf FILE          write a GGUF file
  --hf DIR             write a Hugging Face directory (config.json, model.safetensors,
                       tokenizer.json, tokenizer_config.json)
  --hf-dtype T         f16 (default) or bf16
)";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "hearth synth: %s\n\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int synth_command(const std::vector<std::string>& argv) {
  auto args = Args::parse(argv,
                          {"arch", "preset", "dim", "hidden", "layers", "heads", "kv-heads", "vocab", "ctx", "rope-theta",
                           "experts", "experts-used", "shared-hidden", "type", "seed", "gguf", "hf", "hf-dtype"},
                          {"help"});
  if (!args.is_ok()) return usage_error(args.status().message());
  if (args->has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string preset = args->get("preset").value_or("tiny");
  auto shape = synth_preset(preset);
  if (!shape.is_ok()) return usage_error(shape.status().message());
  SynthOptions o;
  o.shape = *shape;
  o.arch = args->get("arch").value_or("llama");
  if (o.arch == "gptneox" || o.arch == "gptj") o.shape.kv_heads = o.shape.heads;  // no grouped-query attention
  struct IntFlag {
    const char* name;
    int32_t* target;
  };
  for (const IntFlag& f : {IntFlag{"dim", &o.shape.dim}, IntFlag{"hidden", &o.shape.hidden},
                           IntFlag{"layers", &o.shape.layers}, IntFlag{"heads", &o.shape.heads},
                           IntFlag{"kv-heads", &o.shape.kv_heads}, IntFlag{"vocab", &o.shape.vocab},
                           IntFlag{"ctx", &o.shape.context}, IntFlag{"experts", &o.shape.experts},
                           IntFlag{"experts-used", &o.shape.experts_used},
                           IntFlag{"shared-hidden", &o.shape.shared_hidden}}) {
    auto v = args->get_int(f.name, 1, 1 << 20);
    if (!v.is_ok()) return usage_error(v.status().message());
    if (*v) *f.target = static_cast<int32_t>(**v);
  }
  auto theta = args->get_double("rope-theta");
  if (!theta.is_ok()) return usage_error(theta.status().message());
  if (*theta) o.shape.rope_theta = static_cast<float>(**theta);
  auto seed = args->get_int("seed", 0, INT64_MAX);
  if (!seed.is_ok()) return usage_error(seed.status().message());
  o.seed = static_cast<uint64_t>(seed->value_or(1234));
  const std::string type = args->get("type").value_or("f16");
  auto gguf_type = dtype_from_name(type);
  if (!gguf_type || *gguf_type == DType::kBF16) return usage_error("--type must be f32, f16, q8_0 or q4_0");
  o.gguf_type = *gguf_type;
  const std::string hf_dtype = args->get("hf-dtype").value_or("f16");
  if (hf_dtype != "f16" && hf_dtype != "bf16") return usage_error("--hf-dtype must be f16 or bf16");
  o.hf_type = hf_dtype == "bf16" ? DType::kBF16 : DType::kF16;
  o.gguf = args->get("gguf").value_or("");
  o.hf = args->get("hf").value_or("");
  if (o.gguf.empty() && o.hf.empty()) return usage_error("give --gguf FILE and/or --hf DIR");
  o.name = fmt::format("hearth-synth-{}{}-{}", o.arch == "llama" ? "" : o.arch + "-", preset, type);

  const double start = monotonic_seconds();
  if (Status st = synth_write(o); !st.is_ok()) {
    std::fprintf(stderr, "hearth synth: %s\n", st.to_string().c_str());
    return 1;
  }
  std::fprintf(stderr, "hearth synth: wrote %s%s%s in %.1f s\n", o.gguf.c_str(),
               (!o.gguf.empty() && !o.hf.empty()) ? " and " : "", o.hf.c_str(), monotonic_seconds() - start);
  return 0;
}

}  // namespace hearth::cli
