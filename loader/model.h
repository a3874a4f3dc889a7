// Opening a model from disk: any supported container becomes one LoadedModel with a
// ModelConfig, tensors under canonical names (common/model_tensors.h) viewing the
// memory-mapped files, and a TokenizerSource.
//
// Containers: a Hugging Face directory (config.json, model.safetensors or a sharded
// model.safetensors.index.json, tokenizer files), a GGUF v2/v3 file (tokenizer inside),
// a llama2.c checkpoint (tokenizer.bin beside it or given). Weights are mapped, never
// copied (except the packed layers of pre-quantized checkpoints, repacked into blocks:
// loader/prequantized.h). Each container keeps its own q/k row layout and says which RoPE pairing it
// needs (ModelConfig::rope_style), so all containers of one model compute the same
// function. Unsupported architectures, tensor types or features are refused with a
// message naming them. A LoadedModel is immutable after model_open; thread-compatible.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/mapped_file.h"
#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "tokenizer/tokenizer.h"

namespace hearth {

enum class ModelFormat : uint8_t { kGguf = 0, kSafetensors = 1, kLlama2c = 2 };
std::string_view model_format_name(ModelFormat format);

struct ModelOpenOptions {
  // A tokenizer file or directory to use instead of the model's own (required for
  // llama2.c checkpoints without a tokenizer.bin or tok<N>.bin beside them).
  std::filesystem::path tokenizer_path;
};

struct LoadedModel {
  ModelConfig config;
  ModelFormat format = ModelFormat::kGguf;
  std::string name;                 // general.name, the directory or the file name
  std::vector<TensorView> tensors;  // canonical names; views into `files`
  TokenizerSource tokenizer;
  std::vector<MappedFile> files;    // keep the mappings alive
  // Matrices repacked from a pre-quantized checkpoint's packed layers (the one case
  // where tensor views point elsewhere than into `files`).
  std::vector<std::vector<std::byte>> owned;

  // The tensor of that canonical name, or nullptr.
  const TensorView* find(std::string_view name) const;
  // Bytes of all tensors.
  uint64_t weight_bytes() const;
};

// Opens the model at `path` (a file or a directory), validating everything it reads.
Result<LoadedModel> model_open(const std::filesystem::path& path, const ModelOpenOptions& options = {});

// Container-specific openers, used by model_open after it has sniffed the format.
Result<LoadedModel> gguf_model_open(const std::filesystem::path& path);
Result<LoadedModel> hf_model_open(const std::filesystem::path& dir);
// The Hugging Face parameter name of a canonical tensor name in a model of `architecture`
// (GGUF spelling: "llama", "gptj", ...; "blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); nullopt for names HF checkpoints lack.
std::optional<std::string> hf_parameter_name(const std::string& canonical, std::string_view architecture);
// Whether a model of `architecture` multiplies by 1 + w for each norm weight w its
// checkpoint stores (Gemma 2, Gemma 3): the loader holds those norms as 1 + w.
bool hf_norms_offset_by_one(std::string_view architecture);
// `tokenizer_path` may be empty: then tok<vocab>.bin or tokenizer.bin beside the checkpoint.
Result<LoadedModel> llama2c_model_open(const std::filesystem::path& path, const std::filesystem::path& tokenizer_path);

}  // namespace hearth
