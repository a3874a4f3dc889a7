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
constexpr int kMaxHeads = 8;       // query heads of one KV head computed together

// e^x for x <= 0 (a score minus the running maximum), within 2 ulp, in plain float
// operations so the loop over a block's scores vectorizes and every path rounds alike:
// x = n ln2 + r (Cody-Waite), a degree-6 polynomial for e^r, times 2^n built in the
// exponent bits. Below -87 the result is ~1e-38, nothing next to the block's maximum (1).
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (x * 1.44269504088896341f + kMagic) - kMagic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

inline float dot_lanes(const float* a, const float* b, int32_t n) {
  float part[kLanes] = {};
  int32_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) part[l] += a[i + l] * b[i + l];
  }
  for (int l = 0; i < n; ++i, ++l) part[l] += a[i] * b[i];
  // The tree of pairs (l, l + w), spelled out level by level so that it stays in registers.
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = part[l] + part[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  const float s2a = s4[0] + s4[2], s2b = s4[1] + s4[3];
  return s2a + s2b;
}

void attention_impl(const hearth::kernels::AttentionParams& p, int32_t head_begin, int32_t head_end) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int32_t hd = p.head_dim;
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * hd;
  alignas(64) float acc[kMaxHeads][kMaxHeadDim];
  float score[kMaxHeads][kMaxBlockSize];
  float running_max[kMaxHeads], running_sum[kMaxHeads];
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = hearth::kernels::attention_first_key(pos, p.sliding_window);
    // Query heads that share a KV head go together, so each block of keys and values
    // is read from memory once for all of them (then from L1).
    for (int32_t h0 = head_begin; h0 < head_end;) {
      const int32_t kv_head = h0 / group;
      const int32_t h1 = std::min({head_end, (kv_head + 1) * group, h0 + kMaxHeads});
      const int32_t nh = h1 - h0;
      const int64_t kv_off = static_cast<int64_t>(kv_head) * hd;
      for (int32_t g = 0; g < nh; ++g) {
        running_max[g] = -INFINITY;
        running_sum[g] = 0.0f;
        for (int32_t i = 0; i < hd; ++i) acc[g][i] = 0.0f;
      }
      for (int32_t k0 = first; k0 <= pos;) {
        // Keys k0..k1-1 lie in one cache block: consecutive slots.
        const int32_t in_block = k0 % p.block_size;
        const int32_t k1 = std::min({pos + 1, k0 - in_block + p.block_size, k0 + kMaxBlockSize});
        const int64_t slot0 = static_cast<int64_t>(p.block_table[k0 / p.block_size]) * p.block_size + in_block;
        const float* keys = p.k_cache + slot0 * kv_dim + kv_off;
        const float* values = p.v_cache + slot0 * kv_dim + kv_off;
        const int32_t n = k1 - k0;
        for (int32_t g = 0; g < nh; ++g) {
          const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h0 + g) * hd;
          float* sc = score[g];
          float* ac = acc[g];
          float block_max = -INFINITY;
          for (int32_t j = 0; j < n; ++j) {
            sc[j] = dot_lanes(q, keys + j * kv_dim, hd) * p.scale;
            block_max = std::max(block_max, sc[j]);
          }
          if (block_max > running_max[g]) {
            // ~1e-38 on the first block, where the sum and output are still 0.
            const float correction = exp_nonpositive(running_max[g] - block_max);
            running_sum[g] *= correction;
            for (int32_t i = 0; i < hd; ++i) ac[i] *= correction;
            running_max[g] = block_max;
          }
          for (int32_t j = 0; j < n; ++j) sc[j] = exp_nonpositive(sc[j] - running_max[g]);
          for (int32_t j = 0; j < n; ++j) {
            const float w = sc[j];
            running_sum[g] += w;
            const float* v = values + j * kv_dim;
            for (int32_t i = 0; i < hd; ++i) ac[i] += w * v[i];
          }
        }
        k0 = k1;
      }
      for (int32_t g = 0; g < nh; ++g) {
        float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h0 + g) * hd;
        const float inv = 1.0f / running_sum[g];
        for (int32_t i = 0; i < hd; ++i) out[i] = acc[g][i] * inv;
      }
      h0 = h1;
    }
  }
}

}  // namespace
