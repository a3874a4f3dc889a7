// LoRA adapters from disk, checked against the base model they adapt.
//
// A PEFT directory (adapter_config.json and adapter_model.safetensors, as PEFT's
// save_pretrained writes them) becomes a LoraAdapter (common/lora.h): each
// base_model.model.<module>.lora_A/.lora_B pair matched to the base's canonical matrix
// through its Hugging Face name, both factors converted to float32, the scale lora_alpha /
// r (/ sqrt(r) with use_rslora), and B's rows of q/k reordered where the base keeps those
// rows for interleaved RoPE pairs (a llama GGUF or llama2.c checkpoint), so that the
// adapter computes the same function on every container of one model. Anything that would
// change that function and is not applied (DoRA, biases, modules_to_save, per-module
// ranks or alphas, fan_in_fan_out, embedding or LM-head adapters, a module the base lacks
// or a shape that differs from the base's) is refused by name; nothing is ignored.
//
// A GGUF LoRA file (llama.cpp's convert_lora_to_gguf.py: general.type "adapter",
// adapter.type "lora", adapter.lora.alpha, "<matrix>.lora_a" / ".lora_b" factors) is read
// the same way; its rows are already in a GGUF base's order, so on a llama base kept as
// its Hugging Face checkpoint keeps it, it is refused.
//
// Also: a synthetic PEFT directory with seeded factors (tests, benchmarks), and the base
// with an adapter merged into its weights written as a GGUF (the reference an adapted
// forward pass is checked against).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "common/lora.h"
#include "common/status.h"
#include "loader/model.h"

namespace hearth {

// Opens the PEFT directory (or GGUF LoRA file) `dir` as an adapter of the base model
// whose config and tensors (canonical names, any layout) are given, named `name` (empty:
// the directory's name, or the file's without its extension).
Result<LoraAdapter> lora_open(const std::filesystem::path& dir, const ModelConfig& base_config,
                              std::span<const TensorView> base_tensors, const std::string& name = "");

// The shape ({rows, cols}) of each matrix of the base an adapter may adapt (q, k, v, o,
// gate, up, down of every layer that has them), tensors under canonical names.
std::vector<std::array<int64_t, 2>> lora_adaptable_shapes(const ModelConfig& base_config,
                                                          std::span<const TensorView> base_tensors);

struct LoraSynthOptions {
  int32_t rank = 8;
  double alpha = 16.0;
  bool rslora = false;
  std::vector<LoraTarget> targets;  // empty: all seven
  uint64_t seed = 1;
  double strength = 0.5;  // the adapted matrices' change, relative to a base matrix's typical scale
};

// Writes a PEFT directory with seeded factors for every layer of `base` (a family with
// separate q/k/v and gate/up matrices).
Status lora_synth_write(const LoadedModel& base, const LoraSynthOptions& options, const std::filesystem::path& dir);

// Writes `base` with `adapter` merged (W + scale * B A, in float32 from the dequantized
// base) as a GGUF of F32 matrices (gguf_export's families).
Status lora_merge_write(const LoadedModel& base, const LoraAdapter& adapter, const std::filesystem::path& path);

}  // namespace hearth
