// The body of the CPU attention kernel, included by attention.cpp once per instruction
// set it is compiled for (attention_avx2.cpp, attention_avx512.cpp set their target
// flags). Plain loops written so that the compiler vectorizes them: a block's scores
// over its keys (stored transposed), the weighted values over head_dim. Keys are
// visited one cache block at a time: scores for the block, one rescale of the running
// sum and output (online softmax), then the block's values. Everything here
// has internal linkage, so no copy compiled for a wider instruction set can be picked
// by the linker for a narrower one.
//
// Each (query, head) is computed alone, in the same order whatever the batch or the
// split of heads across threads, so a token's output does not depend on its neighbours.
//
// The cache's element type (KvDType) is a template parameter. f16 and bf16 elements are
// widened to float exactly (vcvtph2ps where the path has F16C, a 16-bit shift for bf16):
// a block of one KV head at a time into stack tiles shared by its query heads when
// head_dim * keys fits kWidenTile (the usual blocks of 16), else a row at a time per
// head. Either way they go through the very float operations the f32 cache does, so an
// f16 or bf16 cache gives bit for bit what an f32 cache of the widened values gives, on
// every path.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "common/check.h"
#include "common/half.h"
#include "kernels/cpu/fast_exp.h"
#include "kernels/attention_params.h"
#include "kernels/cpu/attention.h"

namespace {

constexpr int kMaxHeadDim = 1024;  // ModelConfig validation bounds head_dim
constexpr int kMaxBlockSize = 256;
constexpr int kKeyTile = 16;       // keys per vector of scores (the usual block size)
constexpr int kMaxHeads = 8;       // query heads of one KV head computed together
constexpr int kWidenTile = 4096;   // floats of a narrow cache's block widened at once (16 KiB)

using hearth::kernels::KvDType;

// The stored type of one cache element.
template <KvDType D>
using KvElem = std::conditional_t<D == KvDType::kF32, float, uint16_t>;

// dst[i] = src[i] widened to float, exactly, for i < n.
template <KvDType D>
inline void kv_widen(const KvElem<D>* src, int32_t n, float* dst) {
  int32_t i = 0;
  if constexpr (D == KvDType::kF16) {
#if defined(__AVX512F__)
    for (; i + 16 <= n; i += 16) {
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    }
#endif
#if defined(__F16C__)
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    }
#endif
    for (; i < n; ++i) dst[i] = hearth::fp16_to_f32(src[i]);
  } else {
    static_assert(D == KvDType::kBF16);
    for (; i < n; ++i) {  // the high half of a float: vectorizes as a widen and a shift
      const uint32_t bits = static_cast<uint32_t>(src[i]) << 16;
      __builtin_memcpy(dst + i, &bits, sizeof(float));
    }
  }
}

// n floats of `src` as float: the cache itself for f32, else widened into `tile`.
template <KvDType D>
inline const float* kv_as_f32(const KvElem<D>* src, [[maybe_unused]] int32_t n, [[maybe_unused]] float* tile) {
  if constexpr (D == KvDType::kF32) {
    return src;
  } else {
    kv_widen<D>(src, n, tile);
    return tile;
  }
}

// Prefetches the first min(bytes, kPrefetchMax) bytes at p into the caches.
inline void prefetch_bytes(const void* p, int64_t bytes) {
  constexpr int64_t kPrefetchMax = 8192;
  const auto* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < std::min(bytes, kPrefetchMax); i += 64) __builtin_prefetch(c + i);
}

using hearth::kernels::cpu::exp_nonpositive;  // fast_exp.h

// sc[j] = scale * q . key j for the n (<= N) keys of a block, keys[d * bs + j]. Every
// N computes each score the same way, so a full tile (N = kKeyTile, which the compiler
// keeps in registers) and a partial block agree bit for bit.
template <int N, KvDType D>
inline void block_scores(const float* q, const KvElem<D>* keys, int64_t bs, int32_t hd, int32_t n, float scale,
                         float* sc) {
  constexpr bool kWiden = D != KvDType::kF32;
  const int32_t m = N == kKeyTile ? N : n;
  float p0[N], p1[N], p2[N], p3[N];
  float rows[kWiden ? 4 : 1][kWiden ? N : 1];  // key rows d..d+3 widened to float
  for (int32_t j = 0; j < m; ++j) p0[j] = p1[j] = p2[j] = p3[j] = 0.0f;
  int32_t d = 0;
  for (; d + 4 <= hd; d += 4) {
    const KvElem<D>* kd = keys + d * bs;
    const float* k0 = kv_as_f32<D>(kd, m, rows[0]);
    const float* k1 = kv_as_f32<D>(kd + bs, m, rows[kWiden ? 1 : 0]);
    const float* k2 = kv_as_f32<D>(kd + 2 * bs, m, rows[kWiden ? 2 : 0]);
    const float* k3 = kv_as_f32<D>(kd + 3 * bs, m, rows[kWiden ? 3 : 0]);
    const float q0 = q[d], q1 = q[d + 1], q2 = q[d + 2], q3 = q[d + 3];
    for (int32_t j = 0; j < m; ++j) {
      p0[j] += q0 * k0[j];
      p1[j] += q1 * k1[j];
      p2[j] += q2 * k2[j];
      p3[j] += q3 * k3[j];
    }
  }
  for (; d < hd; ++d) {
    const float qd = q[d];
    const float* kd = kv_as_f32<D>(keys + d * bs, m, rows[0]);
    for (int32_t j = 0; j < m; ++j) p0[j] += qd * kd[j];
  }
  for (int32_t j = 0; j < m; ++j) sc[j] = ((p0[j] + p1[j]) + (p2[j] + p3[j])) * scale;
}

// ac[i] += sum over the block's keys j, in order, of w[j] * values[j * hd + i]. HD > 0
// fixes head_dim at compile time (the row is then held in registers); 0 is any size.
template <int HD, KvDType D>
inline void accumulate_values(const KvElem<D>* values, const float* w, int32_t n, int32_t hd, float* ac) {
  constexpr bool kWiden = D != KvDType::kF32;
  if constexpr (HD > 0) {
    float a[HD];
    float row[kWiden ? HD : 1];  // value row j widened to float
    for (int i = 0; i < HD; ++i) a[i] = ac[i];
    for (int32_t j = 0; j < n; ++j) {
      const float* v = kv_as_f32<D>(values + static_cast<int64_t>(j) * HD, HD, row);
      for (int i = 0; i < HD; ++i) a[i] += w[j] * v[i];
    }
    for (int i = 0; i < HD; ++i) ac[i] = a[i];
  } else {
    float row[kWiden ? kMaxHeadDim : 1];
    for (int32_t j = 0; j < n; ++j) {
      const float* v = kv_as_f32<D>(values + static_cast<int64_t>(j) * hd, hd, row);
      for (int32_t i = 0; i < hd; ++i) ac[i] += w[j] * v[i];
    }
  }
}

// One cache block's update of one query head: scores of the block's n keys (keys[d *
// key_stride + j]), one rescale of the running sum and output `ac` (online softmax),
// then the block's values (rows of hd) weighted into `ac`. sc: n floats of scratch.
template <KvDType D>
inline void block_update(const float* q, const KvElem<D>* keys, int64_t key_stride, const KvElem<D>* values,
                         int32_t n, int32_t hd, float scale, float* sc, float* ac, float& running_max,
                         float& running_sum) {
  // Scores of every key of the block at once (vectorized over keys): four partial sums
  // over d mod 4, each in increasing d, then (p0 + p1) + (p2 + p3).
  if (n == kKeyTile) {
    block_scores<kKeyTile, D>(q, keys, key_stride, hd, kKeyTile, scale, sc);  // fixed size: kept in registers
  } else {
    block_scores<kMaxBlockSize, D>(q, keys, key_stride, hd, n, scale, sc);
  }
  float block_max = -INFINITY;
  for (int32_t j = 0; j < n; ++j) block_max = std::max(block_max, sc[j]);
  if (block_max > running_max) {
    // ~1e-38 on the first block, where the sum and output are still 0.
    const float correction = exp_nonpositive(running_max - block_max);
    running_sum *= correction;
    for (int32_t i = 0; i < hd; ++i) ac[i] *= correction;
    running_max = block_max;
  }
  for (int32_t j = 0; j < n; ++j) sc[j] = exp_nonpositive(sc[j] - running_max);
  for (int32_t j = 0; j < n; ++j) running_sum += sc[j];
  switch (hd) {  // common head sizes: the output row stays in registers across the keys
    case 64: accumulate_values<64, D>(values, sc, n, 64, ac); break;
    case 128: accumulate_values<128, D>(values, sc, n, 128, ac); break;
    default: accumulate_values<0, D>(values, sc, n, hd, ac); break;
  }
}

template <KvDType D>
void attention_typed(const hearth::kernels::AttentionParams& p, int32_t head_begin, int32_t head_end) {
  constexpr bool kWiden = D != KvDType::kF32;
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int32_t hd = p.head_dim;
  alignas(64) float acc[kMaxHeads][kMaxHeadDim];
  float score[kMaxHeads][kMaxBlockSize];
  float running_max[kMaxHeads], running_sum[kMaxHeads];
  // A narrow cache's block, widened once for all the query heads that read it.
  alignas(64) float key_tile[kWiden ? kWidenTile : 1];    // [hd, n]
  alignas(64) float value_tile[kWiden ? kWidenTile : 1];  // [n, hd]
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = hearth::kernels::attention_first_key(pos, p.sliding_window);
    // Query heads that share a KV head go together, so each block of keys and values
    // is read from memory once for all of them (then from L1).
    for (int32_t h0 = head_begin; h0 < head_end;) {
      const int32_t kv_head = h0 / group;
      const int32_t h1 = std::min({head_end, (kv_head + 1) * group, h0 + kMaxHeads});
      const int32_t nh = h1 - h0;
      for (int32_t g = 0; g < nh; ++g) {
        running_max[g] = -INFINITY;
        running_sum[g] = 0.0f;
        for (int32_t i = 0; i < hd; ++i) acc[g][i] = 0.0f;
      }
      const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h0) * hd;  // [nh, hd]
      for (int32_t k0 = first; k0 <= pos;) {
        // Keys k0..k1-1 lie in one cache block.
        const int32_t in_block = k0 % p.block_size;
        const int32_t k1 = std::min({pos + 1, k0 - in_block + p.block_size, k0 + kMaxBlockSize});
        const int64_t block = p.block_table[k0 / p.block_size];
        // keys[d * block_size + j]: the block's keys of this head, transposed.
        const KvElem<D>* keys =
            static_cast<const KvElem<D>*>(p.k_cache) +
            hearth::kernels::kv_key_index(block, kv_head, 0, in_block, p.n_kv_heads, hd, p.block_size);
        const KvElem<D>* values =
            static_cast<const KvElem<D>*>(p.v_cache) +
            hearth::kernels::kv_value_index(block, kv_head, in_block, p.n_kv_heads, hd, p.block_size);
        const int32_t n = k1 - k0;
        const int64_t bs = p.block_size;
        if (k1 <= pos && k1 % p.block_size == 0) {
          // The next block of the table is anywhere in memory, where no hardware
          // prefetcher looks: fetch its keys and values of this head while this one is
          // computed (a block is ~1 us of work, DRAM ~0.1 us away).
          const int64_t next = p.block_table[k1 / p.block_size];
          prefetch_bytes(static_cast<const KvElem<D>*>(p.k_cache) +
                             hearth::kernels::kv_key_index(next, kv_head, 0, 0, p.n_kv_heads, hd, p.block_size),
                         hd * bs * static_cast<int64_t>(sizeof(KvElem<D>)));
          prefetch_bytes(static_cast<const KvElem<D>*>(p.v_cache) +
                             hearth::kernels::kv_value_index(next, kv_head, 0, p.n_kv_heads, hd, p.block_size),
                         hd * bs * static_cast<int64_t>(sizeof(KvElem<D>)));
        }
        bool widened = false;
        if constexpr (kWiden) {
          if (static_cast<int64_t>(hd) * n <= kWidenTile) {
            // Widened once into tiles laid out like an f32 cache's block (keys at stride
            // n), then the f32 update itself for each head.
            for (int32_t d = 0; d < hd; ++d) kv_widen<D>(keys + d * bs, n, key_tile + static_cast<int64_t>(d) * n);
            kv_widen<D>(values, n * hd, value_tile);  // the block's rows k0..k1-1 are contiguous
            for (int32_t g = 0; g < nh; ++g) {
              block_update<KvDType::kF32>(q + static_cast<int64_t>(g) * hd, key_tile, n, value_tile, n, hd, p.scale,
                                          score[g], acc[g], running_max[g], running_sum[g]);
            }
            widened = true;
          }
        }
        if (!widened) {  // f32, or a block too large for the tiles: widened a row at a time per head
          for (int32_t g = 0; g < nh; ++g) {
            block_update<D>(q + static_cast<int64_t>(g) * hd, keys, bs, values, n, hd, p.scale, score[g], acc[g],
                            running_max[g], running_sum[g]);
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

void attention_impl(const hearth::kernels::AttentionParams& p, int32_t head_begin, int32_t head_end) {
  switch (p.kv_dtype) {
    case KvDType::kF32: attention_typed<KvDType::kF32>(p, head_begin, head_end); return;
    case KvDType::kF16: attention_typed<KvDType::kF16>(p, head_begin, head_end); return;
    case KvDType::kBF16: attention_typed<KvDType::kBF16>(p, head_begin, head_end); return;
  }
  HEARTH_CHECK(false) << "unsupported KV cache dtype " << static_cast<int>(p.kv_dtype);
}

}  // namespace
