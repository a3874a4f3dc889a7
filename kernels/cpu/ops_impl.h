// The elementwise loops built once per instruction set (ops.cpp for the baseline,
// ops_avx512.cpp with AVX-512 flags), both without FP contraction: every width computes
// each element with the same float operations, so the paths agree bit for bit. Internal
// linkage, like attention_impl.h, so no wider copy can be linked into the narrower path.
#pragma once

#include <cstdint>

#include "kernels/cpu/fast_exp.h"
#include "kernels/lora_params.h"

namespace hearth::kernels::cpu {
namespace {

inline void swiglu_impl(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

// Chunks of 64 summed in float over 8 lanes (in a fixed order, whatever the vector
// width), the chunks in double: the error stays ~1e-7 relative over a 150k vocabulary.
inline double sum_exp_below_impl(const float* x, int64_t n, float max) {
  constexpr int64_t kChunk = 64;
  double total = 0.0;
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    float lanes[8] = {};
    for (int64_t j = 0; j < kChunk; j += 8) {
      for (int k = 0; k < 8; ++k) lanes[k] += exp_nonpositive(x[i + j + k] - max);
    }
    total += static_cast<double>(((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                                 ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])));
  }
  for (; i < n; ++i) total += static_cast<double>(exp_nonpositive(x[i] - max));
  return total;
}

// Sum of a[i] * b[i] in a fixed order whatever the vector width: two accumulators of
// eight lanes (GCC vector types: one ymm each on AVX2 and AVX-512, two xmm on the
// baseline), added lane by lane, then the lanes in a fixed tree, then the tail.
using Lanes8 = float __attribute__((vector_size(32)));
inline float dot_impl(const float* a, const float* b, int64_t n) {
  Lanes8 acc0 = {}, acc1 = {}, x0, y0, x1, y1;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __builtin_memcpy(&x0, a + i, sizeof(x0));
    __builtin_memcpy(&y0, b + i, sizeof(y0));
    __builtin_memcpy(&x1, a + i + 8, sizeof(x1));
    __builtin_memcpy(&y1, b + i + 8, sizeof(y1));
    acc0 += x0 * y0;
    acc1 += x1 * y1;
  }
  if (i + 8 <= n) {
    __builtin_memcpy(&x0, a + i, sizeof(x0));
    __builtin_memcpy(&y0, b + i, sizeof(y0));
    acc0 += x0 * y0;
    i += 8;
  }
  const Lanes8 acc = acc0 + acc1;
  float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// A LoRA product's shrink for the rows `rows` of one slot (factors f): their scratch
// rows' values j0..j1-1 (A[j] . x[row]); each A row read once for all of them.
inline void lora_shrink_impl(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n_rows,
                             int32_t j0, int32_t j1) {
  for (int32_t j = j0; j < j1; ++j) {
    const float* a = f.a + j * p.in;
    for (int64_t i = 0; i < n_rows; ++i) {
      const int64_t t = rows[i];
      p.scratch[t * p.max_rank + j] = dot_impl(a, p.x + t * p.in, p.in);
    }
  }
}

// Its expansion: outputs o0..o1-1 (at most kLoraOutChunk) of those rows, y += scale *
// sum_j scratch[row, j] * Bt[j, o], the sum over j in order for each output (whatever
// the vector width); Bt's rows of that chunk stay in cache for all the rows.
inline constexpr int64_t kLoraOutChunk = 128;
inline void lora_expand_impl(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n_rows,
                             int64_t o0, int64_t o1) {
  float acc[kLoraOutChunk];
  for (int64_t c0 = o0; c0 < o1; c0 += kLoraOutChunk) {
    const int64_t m = o1 - c0 < kLoraOutChunk ? o1 - c0 : kLoraOutChunk;
    for (int64_t i = 0; i < n_rows; ++i) {
      const int64_t t = rows[i];
      const float* shrunk = p.scratch + t * p.max_rank;
      for (int64_t k = 0; k < m; ++k) acc[k] = 0.0f;
      for (int32_t j = 0; j < f.rank; ++j) {
        const float s = shrunk[j];
        const float* bt = f.bt + j * p.out + c0;
        for (int64_t k = 0; k < m; ++k) acc[k] += s * bt[k];
      }
      float* y = p.y + t * p.out + c0;
      for (int64_t k = 0; k < m; ++k) y[k] += f.scale * acc[k];
    }
  }
}

}  // namespace
}  // namespace hearth::kernels::cpu
