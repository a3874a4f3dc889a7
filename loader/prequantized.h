// Pre-quantized Hugging Face checkpoints: GPTQ (AutoGPTQ / GPTQModel packing) and AWQ
// (AutoAWQ's GEMM packing), read from config.json's `quantization_config` and repacked
// into the block formats the kernels stream, exactly.
//
// A packed linear layer is `<module>.qweight`, `.qzeros`, `.scales` (and for GPTQ an
// optional `.g_idx`): w[r, c] = scale[g, r] * (q[r, c] - zero[g, r]) with g the group of
// input column c. GPTQ packs 32 / bits values per int32 along the input dimension
// (qweight [in / pack, out], low bits first) and the zeros along the output dimension
// (qzeros [groups, out / pack]); checkpoint_format "gptq" (AutoGPTQ's v1, the common
// one) stores each zero minus one, "gptq_v2" the zero itself. AWQ packs 8 values per
// int32 along the output dimension (qweight [in, out / 8], qzeros [groups, out / 8]) in
// the order 0 2 4 6 1 3 5 7, and stores zeros as they are.
//
// Repacking, exact in every case it accepts:
// - symmetric zeros (8 for 4 bits, 128 for 8) with groups in column order -> Q4_0 / Q8_0
//   blocks (scale as the block's fp16 d, codes as they are);
// - other 4-bit zeros (asymmetric GPTQ, AWQ) -> Q8_0 blocks holding q - zero (8.5 bits a
//   weight: exact, twice the memory of the checkpoint);
// - act-order (desc_act) layers, whose g_idx scatters each group's columns: the columns
//   sorted by group (stably), so each 32-column block has one scale, and the order kept
//   as the matrix's `.perm` tensor (common/model_tensors.h), which the engine applies to
//   the input; the down projection's order moves into the gate and up rows instead
//   (exact, and free at run time);
// refused by name: 8-bit asymmetric zeros, group sizes (or act-order groups) that are not
// whole 32-value blocks, and any other quant_method.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "common/dtype.h"
#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

struct LoadedModel;

struct PrequantConfig {
  enum class Method : uint8_t { kGptq, kAwq };
  Method method = Method::kGptq;
  int32_t bits = 4;
  int32_t group_size = 128;  // -1 in the file: one group over all input columns
  int32_t zero_offset = 1;   // GPTQ v1 stores zero - 1
  bool desc_act = false;     // GPTQ act-order: every layer must carry its g_idx
};

// config.json's quantization_config: nullopt when the model has none; kUnsupported
// naming any method, bit width or packing version hearth does not read.
Result<std::optional<PrequantConfig>> prequant_config(const boost::json::object& config);

// One packed linear layer as found in the checkpoint (views into the mapped files).
struct PackedLinear {
  const TensorView* qweight = nullptr;  // int32
  const TensorView* qzeros = nullptr;   // int32
  const TensorView* scales = nullptr;   // f16
  const TensorView* g_idx = nullptr;    // int32, optional (GPTQ)
};

struct RepackedMatrix {
  DType type = DType::kQ4_0;
  int64_t rows = 0;  // out_features
  int64_t cols = 0;  // in_features
  std::vector<std::byte> bytes;
  // Act-order: stored column j is the layer's input column perm[j] (empty: in order).
  std::vector<int32_t> perm;
};

// The order to store a layer's columns in, given each column's group: empty when the
// groups are in column order (groups[c] == c / group_size), else the columns sorted by
// group (stably), so that every 32-column block has one group. kUnsupported when a group
// is not a whole number of 32-column blocks.
Result<std::vector<int32_t>> columns_by_group(std::span<const int32_t> groups, int64_t group_size);

// The layer's matrix in Q4_0 or Q8_0 blocks; `name` for messages. kFormat on shapes or
// dtypes that do not fit together, kUnsupported for what the repack refuses (above).
Result<RepackedMatrix> prequant_repack(const PrequantConfig& config, const PackedLinear& layer,
                                       const std::string& name);

// Replaces every packed layer of an HF model (model.tensors holds its other tensors,
// `int32_tensors` the checkpoint's I32 ones) by its repacked matrix under the canonical
// name; the bytes live in model.owned. kFormat when a layer lacks a part, a part has
// no layer, or an I32 tensor is left over.
// `canonical` maps an HF parameter name ("model.layers.0.self_attn.q_proj.weight") to
// hearth's.
Status prequant_apply(const PrequantConfig& config, std::vector<TensorView> int32_tensors,
                      const std::function<std::string(const std::string&)>& canonical, LoadedModel& model);

// Puts repacked matrices into `model` under their canonical names, replacing any tensor
// of that name (the bytes live in model.owned): an act-order one's order becomes its
// `.perm` tensor, except a down projection's, which reorders its layer's gate and up
// rows. kFormat when those are missing or not plain matrices. (prequant_apply's last
// step; hearth quantize writes act-order GGUF files through it.)
Status prequant_place(LoadedModel& model, std::vector<std::pair<std::string, RepackedMatrix>> matrices);

}  // namespace hearth
