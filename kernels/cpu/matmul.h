// CPU matrix products with weights of any DType and float32 activations.
//
// F32/F16/BF16 weights multiply the float activations directly (F16/BF16 widened on the
// fly). For Q8_0/Q4_0 weights the activations are first quantized to int8 in blocks of
// 32 (QuantizedActivations: d = max|x| / 127, q = round-to-nearest-even(x / d)) and each
// block's integer dot product is scaled by both scales, as llama.cpp does: the weights
// are read once, never dequantized into a copy. Every instruction-set path (isa.h)
// computes the same function up to float summation order; the scalar path is the
// reference. Callers split the row range across threads; disjoint ranges are safe
// to run at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace hearth::kernels::cpu {

// Activations quantized per 32 values, token by token.
struct QuantizedActivations {
  int8_t* qs = nullptr;  // [n_tokens, cols]
  float* d = nullptr;    // [n_tokens, cols / 32] scales
  float* s = nullptr;    // [n_tokens, cols / 32] d * sum(q) of each block
  int32_t* offset4 = nullptr;  // [n_tokens, cols / 32] -8 * sum(q) of each block (Q4_0 nibbles are q + 8)
  int32_t* offset8 = nullptr;  // [n_tokens, cols / 32] -128 * sum(q) (Q8_0 read as biased bytes q + 128)
  int64_t cols = 0;
  int64_t n_tokens = 0;
};

// Bytes of scratch QuantizedActivations needs for [n_tokens, cols].
size_t quantized_activation_bytes(int64_t n_tokens, int64_t cols);
// Quantizes x ([n_tokens, cols], cols a multiple of 32) into `scratch` and returns the view.
QuantizedActivations quantize_activations(const float* x, int64_t n_tokens, int64_t cols, void* scratch);
// The same in two steps, so that callers can split the tokens across threads: the view
// of `scratch`, then tokens [t_begin, t_end) of x quantized into it.
QuantizedActivations quantized_activations_view(int64_t n_tokens, int64_t cols, void* scratch);
void quantize_activation_rows(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end);
// Whether weights of `type` multiply quantized activations (Q8_0, Q4_0 and their R16
// layouts). R16 weights are computed 16 rows at a time: row ranges may be any, but
// whole groups of 16 are what the work is split by.
bool matmul_uses_quantized_activations(DType type);

struct MatmulParams {
  DType type = DType::kF32;
  const void* w = nullptr;  // [rows, cols] of `type`
  int64_t rows = 0;
  int64_t cols = 0;
  const float* x = nullptr;                    // [n_tokens, cols]
  const QuantizedActivations* xq = nullptr;    // required for Q8_0 / Q4_0 weights
  int64_t n_tokens = 0;
  float* y = nullptr;                          // [n_tokens, rows]
  uint64_t row_bytes = 0;                      // set by matmul_rows
  int prefetch_bytes = 0;                      // set by matmul_rows (weight_prefetch_bytes(), isa.h)
};

// Computes y[t, r] for r in [row_begin, row_end) and every token, on the active path.
void matmul_rows(const MatmulParams& p, int64_t row_begin, int64_t row_end);

// dst[n] = the values of one row of `type`.
void dequantize_row(DType type, const void* row, float* dst, int64_t n);

}  // namespace hearth::kernels::cpu
