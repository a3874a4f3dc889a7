#include "kernels/cpu/attention.h"

#include <cmath>

namespace hearth::kernels::cpu {

void attention(const AttentionParams& p, int32_t head_begin, int32_t head_end) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  constexpr int kMaxHeadDim = 1024;  // ModelConfig validation bounds head_dim
  float acc[kMaxHeadDim];
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = attention_first_key(pos, p.sliding_window);
    for (int32_t h = head_begin; h < head_end; ++h) {
      const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      const int64_t kv_off = static_cast<int64_t>(h / group) * p.head_dim;
      float running_max = -INFINITY;
      float running_sum = 0.0f;
      for (int32_t i = 0; i < p.head_dim; ++i) acc[i] = 0.0f;
      for (int32_t k = first; k <= pos; ++k) {
        const int64_t slot = static_cast<int64_t>(p.block_table[k / p.block_size]) * p.block_size + k % p.block_size;
        const float* key = p.k_cache + slot * kv_dim + kv_off;
        float s = 0.0f;
        for (int32_t i = 0; i < p.head_dim; ++i) s += q[i] * key[i];
        s *= p.scale;
        const float* value = p.v_cache + slot * kv_dim + kv_off;
        if (s > running_max) {
          const float correction = std::exp(running_max - s);  // 0 on the first key
          running_sum = running_sum * correction + 1.0f;
          for (int32_t i = 0; i < p.head_dim; ++i) acc[i] = acc[i] * correction + value[i];
          running_max = s;
        } else {
          const float w = std::exp(s - running_max);
          running_sum += w;
          for (int32_t i = 0; i < p.head_dim; ++i) acc[i] += w * value[i];
        }
      }
      float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      const float inv = 1.0f / running_sum;
      for (int32_t i = 0; i < p.head_dim; ++i) out[i] = acc[i] * inv;
    }
  }
}

}  // namespace hearth::kernels::cpu
