// Synthetic models with seeded pseudo-random weights, written as GGUF (F32, F16, Q8_0,
// Q4_0) and/or as a Hugging Face directory (F16 or BF16), for tests, benchmarks and demos
// of realistic size without downloads. Families (SynthOptions::arch): llama, qwen3
// (q/k norms), gptneox (LayerNorm, parallel residual, fused QKV, quarter rotary, GELU,
// biases), gptj (LayerNorm, shared-norm parallel residual, quarter interleaved rotary,
// tanh GELU, biases, LM head bias), qwen3moe, qwen2moe and mixtral (softmax-routed
// experts: per expert in HF, merged [experts, rows, cols] in GGUF as llama.cpp writes
// them; qwen2moe with q/k/v biases and a sigmoid-gated shared expert), gemma3 (GeGLU,
// q/k norms, block output norms, (1 + w) norms, scaled tied embeddings, five windowed
// layers to one global with its own RoPE base), gemma2 (as gemma3 without q/k norms,
// every other layer windowed, soft-capped attention scores and logits), glm4moe (GLM-4.5:
// q/k/v biases, half-rotary heads, a dense first layer, then sigmoid-routed experts
// with a choice bias and scaled weights beside an ungated shared expert).
//
// The llama weights follow ../shared/tools/peer/make_model.py's generator exactly (splitmix64
// of fnv1a64(HF tensor name) ^ seed; the same scales, F16 master values, q/k rows
// permuted for the GGUF, ggml's reference quantizers), so a model made here and one made
// there hold the same weights and hearth and llama.cpp can be compared on either.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "common/dtype.h"
#include "common/pooling.h"
#include "common/status.h"

namespace hearth {

struct SynthShape {
  int32_t dim = 64, hidden = 256, layers = 5, heads = 4, kv_heads = 2, vocab = 512, context = 512;
  float rope_theta = 10000.0f;
  int32_t experts = 8, experts_used = 2;  // qwen3moe, qwen2moe and mixtral (each expert of `hidden`)
  int32_t sliding_window = 0;             // gemma's windowed layers (0: 512)
  int32_t shared_hidden = 0;              // qwen2moe's shared expert (0: 2 * hidden)
  int32_t dense_layers = 1, dense_hidden = 0;  // glm4moe's leading dense layers (0: 2 * hidden)
  float attn_softcap = 0.0f, final_softcap = 0.0f;  // gemma2's (0: 50 and 30, its defaults)
};

// "tiny" (dim 64, 5 layers, vocab 512), "1b" (dim 2048, hidden 8192, 16 layers, 32 heads,
// 8 kv heads, vocab 32000), "7b" (Llama-2-7B shape), "1b-moe" (for qwen3moe and mixtral:
// dim 2048, 24 layers, 32/4 heads, 32 experts of 1024 with 4 per token: ~1B active).
Result<SynthShape> synth_preset(std::string_view name);

// The families synth writes, by their GGUF names.
inline constexpr std::string_view kSynthArchs[] = {"llama",   "qwen3",  "gptneox", "gptj",   "qwen3moe",
                                                    "qwen2moe", "glm4moe", "mixtral", "gemma2", "gemma3"};

struct SynthOptions {
  SynthShape shape;
  std::string arch = "llama";       // one of kSynthArchs
  std::string name = "synth";       // general.name
  uint64_t seed = 1234;
  std::filesystem::path gguf;       // empty: no GGUF
  DType gguf_type = DType::kF16;    // of the 2-D tensors; norms stay F32
  std::filesystem::path hf;         // empty: no HF directory
  DType hf_type = DType::kF16;      // F16 or BF16
  // An embedding model's pooling: GGUF's {arch}.pooling_type, the HF directory's
  // 1_Pooling/config.json (sentence-transformers); kNone: neither says one.
  Pooling pooling = Pooling::kNone;
};

Status synth_write(const SynthOptions& options);

// One value of the generator: element i of the tensor `hf_name` at `scale`.
float synth_uniform(std::string_view hf_name, uint64_t seed, uint64_t i, double scale);

}  // namespace hearth
