// The body of the CPU attention kernel, included by attention.cpp once per instruction
// set it is compiled for (attention_avx2.cpp, attention_avx512.cpp set their target
// flags). Plain loops written so that the compiler vectorizes them over head_dim: the
// query-key dot products keep 16 partial sums, value rows are accumulated elementwise.
// Keys are visited one cache block at a time: scores for the block, one rescale of the
// running sum and output (online softmax), then the block's values. Everything here
// has internal linkage, so no copy compiled for a wider instruction set can be picked
// by the linker for a narrower one.
//
// Each (query, head) is computed alone, in the same order whatever the batch or the
// split of heads across threads, so a token's output does not depend on its neighbours.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention_params.h"
#include "kernels/cpu/attention.h"

namespace {

constexpr int kLanes = 16;
constexpr int kMaxHeadDim = 1024;  // ModelConfig validation bounds head_dim
constexpr int kMaxBlockSize = 256;

inline float dot_lanes(const float* a, const float* b, int32_t n) {
  float part[kLanes] = {};
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) part[l] += a[i] * b[i];
  for (int w = kLanes / 2; w > 0; w /= 2) {
    for (int l = 0; l < w; ++l) part[l] += part[l + w];
  }
  return part[0];
}

void attention_impl(const hearth::kernels::AttentionParams& p, int32_t head_begin, int32_t head_end) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int32_t hd = p.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * hd;
  alignas(64) float acc[kMaxHeadDim];
  float score[kMaxBlockSize];
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = hearth::kernels::attention_first_key(pos, p.sliding_window);
    for (int32_t h = head_begin; h < head_end; ++h) {
      const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * hd;
      const int64_t kv_off = static_cast<int64_t>(h / group) * hd;
      float running_max = -INFINITY;
      float running_sum = 0.0f;
      for (int32_t i = 0; i < hd; ++i) acc[i] = 0.0f;
      for (int32_t k0 = first; k0 <= pos;) {
        // Keys k0..k1-1 lie in one cache block: consecutive slots.
        const int32_t in_block = k0 % p.block_size;
        const int32_t k1 = std::min({pos + 1, k0 - in_block + p.block_size, k0 + kMaxBlockSize});
        const int64_t slot0 = static_cast<int64_t>(p.block_table[k0 / p.block_size]) * p.block_size + in_block;
        const float* keys = p.k_cache + slot0 * kv_dim + kv_off;
        const float* values = p.v_cache + slot0 * kv_dim + kv_off;
        const int32_t n = k1 - k0;
        float block_max = -INFINITY;
        for (int32_t j = 0; j < n; ++j) {
          score[j] = dot_lanes(q, keys + j * kv_dim, hd) * p.scale;
          block_max = std::max(block_max, score[j]);
        }
        if (block_max > running_max) {
          const float correction = std::exp(running_max - block_max);  // 0 on the first block
          running_sum *= correction;
          for (int32_t i = 0; i < hd; ++i) acc[i] *= correction;
          running_max = block_max;
        }
        for (int32_t j = 0; j < n; ++j) {
          const float w = std::exp(score[j] - running_max);
          running_sum += w;
          const float* v = values + j * kv_dim;
          for (int32_t i = 0; i < hd; ++i) acc[i] += w * v[i];
        }
        k0 = k1;
      }
      float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * hd;
      const float inv = 1.0f / running_sum;
      for (int32_t i = 0; i < hd; ++i) out[i] = acc[i] * inv;
    }
  }
}

}  // namespace
