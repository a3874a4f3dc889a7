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

// Sum of a[i] * b[i] over eight lanes in a fixed order, whatever the vector width.
inline float dot_impl(const float* a, const float* b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) lanes[k] += a[i + k] * b[i + k];
  }
  float sum = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Rows t0..t1-1 of a LoRA product: each adapted row shrunk into its scratch row (A x),
// then expanded into y (scale * B (A x)).
inline void lora_rows_impl(const LoraProduct& p, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t s = p.row_slot[t];
    if (s < 0 || s >= p.n_slots || p.factors[s].a == nullptr) continue;
    const LoraFactors& f = p.factors[s];
    float* shrunk = p.scratch + t * p.max_rank;
    const float* x = p.x + t * p.in;
    for (int32_t j = 0; j < f.rank; ++j) shrunk[j] = dot_impl(f.a + j * p.in, x, p.in);
    float* y = p.y + t * p.out;
    for (int64_t o = 0; o < p.out; ++o) y[o] += f.scale * dot_impl(f.b + o * f.rank, shrunk, f.rank);
  }
}

}  // namespace
}  // namespace hearth::kernels::cpu
