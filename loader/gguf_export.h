// Writing a LoadedModel back out as a GGUF file, with its weight matrices converted to a
// chosen type (F32, F16, BF16, Q8_0, Q4_0; norms and biases stay F32). Used to make
// quantized copies of a model and by tests. Q/K rows are written in the layout the GGUF
// architecture expects (interleaved RoPE pairs for "llama"), so the copy computes the
// same function. The model's tokenizer must be a GGUF vocabulary.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/status.h"
#include "loader/model.h"

namespace hearth {

// Rows of a q or k matrix ([rows, cols], heads of head_dim rows) laid out for
// rotate-half RoPE pairs, reordered for interleaved pairs: row h*hd + 2i + j takes row
// h*hd + j*hd/2 + i (llama.cpp's converter does the same).
std::vector<float> rope_rows_half_to_interleaved(const std::vector<float>& w, int64_t rows, int64_t cols,
                                                 int64_t head_dim);

// A matrix already converted by the caller: its type and bytes, rows in the source
// model's order (gguf_export reorders q/k rows itself). Asked for weight matrices only;
// nullopt: convert as usual.
struct ExportedTensor {
  DType type = DType::kF32;
  std::vector<std::byte> bytes;
};
using ExportOverride = std::function<std::optional<ExportedTensor>(const std::string& name)>;

Status gguf_export(const LoadedModel& model, DType matrix_type, const std::filesystem::path& path,
                   const ExportOverride& override_matrix = {});

// Whether gguf_export writes models of `architecture` (llama, mistral, qwen2); the
// others' GGUF layouts (fused or merged tensors, family keys) are not written.
Status gguf_export_check(std::string_view architecture);

}  // namespace hearth
