// CPU matrix products with weights of any DType and float32 activations.
//
// Quantized rows (Q8_0, Q4_0) are dequantized on the fly: for one token the dot product
// reads the blocks directly; for several tokens each row is expanded once into a
// caller-provided scratch row and reused for every token. Callers split the row range
// across threads; the function itself is thread-safe for disjoint row ranges.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace hearth::kernels::cpu {

struct MatmulParams {
  DType type = DType::kF32;
  const void* w = nullptr;  // [rows, cols] of `type`
  int64_t rows = 0;
  int64_t cols = 0;
  const float* x = nullptr;  // [n_tokens, cols]
  int64_t n_tokens = 0;
  float* y = nullptr;        // [n_tokens, rows]
};

// Computes y[t, r] for r in [row_begin, row_end) and every token. `scratch` holds at
// least `cols` floats (used when n_tokens > 1).
void matmul_rows(const MatmulParams& p, int64_t row_begin, int64_t row_end, float* scratch);

// One row of `type` (n values, a whole number of blocks) dotted with x[n].
float dot_row(DType type, const void* row, const float* x, int64_t n);

// dst[n] = the values of one row of `type`.
void dequantize_row(DType type, const void* row, float* dst, int64_t n);

// fp16 -> f32 through a 256 KiB table (exact; fast without F16C).
float fp16_lut(uint16_t h);

}  // namespace hearth::kernels::cpu
