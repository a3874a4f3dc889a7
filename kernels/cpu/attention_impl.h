// The body of the CPU attention kernel, included by attention.cpp once per instruction
// set it is compiled for (attention_avx2.cpp, attention_avx512.cpp set their target
// flags). Keys are visited one cache block at a time: scores for the block, one rescale
// of the running sum and output (online softmax), then the block's values. The blocks
// go in the outer loop and all the query heads of the call (as many as kStateFloats
// holds) in the inner one: a block's KV heads lie side by side in memory, so a pass
// streams through each block once, and the query heads that share a KV head read its
// keys and values from memory once (then from L1). Everything here has internal
// linkage, so no copy compiled for a wider instruction set can be picked by the linker
// for a narrower one.
//
// Two ways through a block, with the same float operations per head in the same order
// (so every path, either way, gives the scalar path's bits; tested):
// - plain loops that the compiler vectorizes (a block's scores over its keys, stored
//   transposed; the weighted values over head_dim), for any shape;
// - on the AVX2 and AVX-512 paths, for full blocks of 16 keys and head_dim 64 or 128
//   (the common shapes), block_update_heads: intrinsics that widen each key and value
//   row straight into registers once for several query heads and keep their partial
//   scores and output rows in registers for the whole block. Soft-capped scores
//   (Gemma 2: cap * tanh(s / cap)) go the first way only.
//
// The dot products of queries and keys and the weighted sums of values are fused
// multiply-adds (vfmadd; std::fma on the scalar path, a libm call in the baseline
// build, so that path is several times slower), half the float operations of a multiply
// and an add; the build contracts nothing else (-ffp-contract=off), so the paths agree.
//
// Each (query, head) is computed alone, in the same order whatever the batch or the
// split of heads across threads, so a token's output does not depend on its neighbours.
//
// The cache's element type (KvDType) is a template parameter. f16 and bf16 elements are
// widened to float exactly (vcvtph2ps where the path has F16C, a 16-bit shift for bf16):
// in registers on the fast way above; else a block of one KV head at a time into stack
// tiles shared by its query heads when head_dim * keys fits kWidenTile, else a row at a
// time per head. Every way they go through the very float operations the f32 cache does,
// so an f16 or bf16 cache gives bit for bit what an f32 cache of the widened values
// gives, on every path.
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

constexpr int kMaxHeadDim = 1024;   // ModelConfig validation bounds head_dim
constexpr int kMaxBlockSize = 256;
constexpr int kKeyTile = 16;        // keys per vector of scores (the usual block size)
constexpr int kStateFloats = 8192;  // output rows of the query heads computed together (32 KiB)
constexpr int kStateHeads = 256;    // query heads computed together, at most
constexpr int kWidenTile = 4096;    // floats of a narrow cache's block widened at once (16 KiB)

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
      p0[j] = std::fma(q0, k0[j], p0[j]);
      p1[j] = std::fma(q1, k1[j], p1[j]);
      p2[j] = std::fma(q2, k2[j], p2[j]);
      p3[j] = std::fma(q3, k3[j], p3[j]);
    }
  }
  for (; d < hd; ++d) {
    const float qd = q[d];
    const float* kd = kv_as_f32<D>(keys + d * bs, m, rows[0]);
    for (int32_t j = 0; j < m; ++j) p0[j] = std::fma(qd, kd[j], p0[j]);
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
      for (int i = 0; i < HD; ++i) a[i] = std::fma(w[j], v[i], a[i]);
    }
    for (int i = 0; i < HD; ++i) ac[i] = a[i];
  } else {
    float row[kWiden ? kMaxHeadDim : 1];
    for (int32_t j = 0; j < n; ++j) {
      const float* v = kv_as_f32<D>(values + static_cast<int64_t>(j) * hd, hd, row);
      for (int32_t i = 0; i < hd; ++i) ac[i] = std::fma(w[j], v[i], ac[i]);
    }
  }
}

// One cache block's update of one query head: scores of the block's n keys (keys[d *
// key_stride + j]), one rescale of the running sum and output `ac` (online softmax),
// then the block's values (rows of hd) weighted into `ac`. sc: n floats of scratch.
template <KvDType D>
inline void block_update(const float* q, const KvElem<D>* keys, int64_t key_stride, const KvElem<D>* values,
                         int32_t n, int32_t hd, float scale, float softcap, float* sc, float* ac, float& running_max,
                         float& running_sum) {
  // Scores of every key of the block at once (vectorized over keys): four partial sums
  // over d mod 4, each in increasing d, then (p0 + p1) + (p2 + p3).
  if (n == kKeyTile) {
    block_scores<kKeyTile, D>(q, keys, key_stride, hd, kKeyTile, scale, sc);  // fixed size: kept in registers
  } else {
    block_scores<kMaxBlockSize, D>(q, keys, key_stride, hd, n, scale, sc);
  }
  if (softcap > 0.0f) {
    for (int32_t j = 0; j < n; ++j) sc[j] = softcap * std::tanh(sc[j] / softcap);  // as the reference
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

#if defined(__AVX2__)
// The path's float vector (kLanes floats) and the few operations the full-block update
// below needs of it.
#if defined(__AVX512F__)
using Vec = __m512;
constexpr int kLanes = 16;
inline Vec vzero() { return _mm512_setzero_ps(); }
inline Vec vset1(float x) { return _mm512_set1_ps(x); }
inline Vec vadd(Vec a, Vec b) { return _mm512_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm512_sub_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }  // a * b + c, rounded once
inline Vec vmax(Vec a, Vec b) { return _mm512_max_ps(a, b); }
inline float vreduce_max(Vec a) { return _mm512_reduce_max_ps(a); }
inline Vec vload(const float* p) { return _mm512_load_ps(p); }
inline void vstore(float* p, Vec a) { _mm512_store_ps(p, a); }
// kLanes cache elements at `src` widened to float, exactly as kv_widen widens them.
template <KvDType D>
inline Vec vwiden(const KvElem<D>* src) {
  if constexpr (D == KvDType::kF32) {
    return _mm512_loadu_ps(src);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
    if constexpr (D == KvDType::kF16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
#else
using Vec = __m256;
constexpr int kLanes = 8;
inline Vec vzero() { return _mm256_setzero_ps(); }
inline Vec vset1(float x) { return _mm256_set1_ps(x); }
inline Vec vadd(Vec a, Vec b) { return _mm256_add_ps(a, b); }
inline Vec vsub(Vec a, Vec b) { return _mm256_sub_ps(a, b); }
inline Vec vmul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
inline Vec vfma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vmax(Vec a, Vec b) { return _mm256_max_ps(a, b); }
inline float vreduce_max(Vec a) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline Vec vload(const float* p) { return _mm256_load_ps(p); }
inline void vstore(float* p, Vec a) { _mm256_store_ps(p, a); }
template <KvDType D>
inline Vec vwiden(const KvElem<D>* src) {
  if constexpr (D == KvDType::kF32) {
    return _mm256_loadu_ps(src);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    if constexpr (D == KvDType::kF16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}
#endif

// Fetches the `Bytes` at p (a multiple of 64, 64-byte aligned) towards the core, a cache
// line at a time, without waiting for them.
template <int Bytes>
inline void prefetch_lines(const void* p) {
  static_assert(Bytes % 64 == 0);
  const char* a = static_cast<const char*>(p);
#pragma GCC unroll 8
  for (int i = 0; i < Bytes; i += 64) __builtin_prefetch(a + i, 0, 1);  // into L2: into L1 was slower
}

// Query heads one full-block update computes at once: as many as keep their partial
// scores (4 vectors of kKeyTile keys each) and output rows in the registers.
template <int HD>
constexpr int kHeadsAtOnce = kLanes == 16 ? 256 / HD : 1;

// block_update for NH query heads of one KV head at once, over a full block of kKeyTile
// keys with head_dim HD: per head, the very float operations block_update does in the
// same order (so the results are its bits), but each key and value row is loaded and
// widened straight into registers, once for the NH heads, and the heads' partial
// scores and output rows stay in registers for the whole block. q: [NH, HD]; ac:
// [NH, HD], running_max, running_sum: the heads' state.
template <int HD, int NH, KvDType D>
inline void block_update_heads(const float* q, const KvElem<D>* keys, int64_t key_stride, const KvElem<D>* values,
                               float scale, float* ac, float* running_max, float* running_sum,
                               const KvElem<D>* next_keys, const KvElem<D>* next_values) {
  constexpr int kTile = kKeyTile / kLanes;  // vectors per row of the block's keys
  constexpr int kVecs = HD / kLanes;        // vectors per output row
  // Of each head's output row, held in registers at once: half the register file.
  constexpr int kChunk = std::min(kVecs, (kLanes == 16 ? 16 : 8) / NH);
  static_assert(HD % kLanes == 0 && kVecs % kChunk == 0);
  Vec part[NH][4][kTile];  // scores over d mod 4, as block_scores keeps them
#pragma GCC unroll 16
  for (int g = 0; g < NH; ++g) {
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < kTile; ++v) part[g][r][v] = vzero();
    }
  }
  for (int d = 0; d < HD; d += 4) {
    // The next block's rows d..d+3 of this KV head (all of them for blocks of kKeyTile keys).
    prefetch_lines<4 * kKeyTile * sizeof(KvElem<D>)>(next_keys + d * key_stride);
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      Vec k[kTile];
#pragma GCC unroll 2
      for (int v = 0; v < kTile; ++v) k[v] = vwiden<D>(keys + (d + r) * key_stride + v * kLanes);
#pragma GCC unroll 8
      for (int g = 0; g < NH; ++g) {
        const Vec qd = vset1(q[g * HD + d + r]);
#pragma GCC unroll 2
        for (int v = 0; v < kTile; ++v) part[g][r][v] = vfma(qd, k[v], part[g][r][v]);
      }
    }
  }
  alignas(64) float w[NH][kKeyTile];  // each head's softmax weights of the block's keys
#pragma GCC unroll 8
  for (int g = 0; g < NH; ++g) {
    Vec sc[kTile];
#pragma GCC unroll 2
    for (int v = 0; v < kTile; ++v) {
      sc[v] = vmul(vadd(vadd(part[g][0][v], part[g][1][v]), vadd(part[g][2][v], part[g][3][v])), vset1(scale));
    }
    // The largest score: a maximum is exact in any order (a zero's sign aside, which
    // nothing below can tell apart).
    Vec most = sc[0];
#pragma GCC unroll 2
    for (int v = 1; v < kTile; ++v) most = vmax(most, sc[v]);
    const float block_max = vreduce_max(most);
    if (block_max > running_max[g]) {
      const float correction = exp_nonpositive(running_max[g] - block_max);
      running_sum[g] *= correction;
      for (int i = 0; i < HD; ++i) ac[g * HD + i] *= correction;
      running_max[g] = block_max;
    }
#pragma GCC unroll 2
    for (int v = 0; v < kTile; ++v) vstore(w[g] + v * kLanes, vsub(sc[v], vset1(running_max[g])));
    for (int j = 0; j < kKeyTile; ++j) w[g][j] = exp_nonpositive(w[g][j]);
    for (int j = 0; j < kKeyTile; ++j) running_sum[g] += w[g][j];
  }
  for (int c = 0; c < kVecs; c += kChunk) {  // vectors c..c+kChunk-1 of each head's output row
    Vec out[NH][kChunk];
#pragma GCC unroll 16
    for (int g = 0; g < NH; ++g) {
#pragma GCC unroll 16
      for (int i = 0; i < kChunk; ++i) out[g][i] = vload(ac + g * HD + (c + i) * kLanes);
    }
    for (int j = 0; j < kKeyTile; ++j) {
      if (c == 0) prefetch_lines<HD * sizeof(KvElem<D>)>(next_values + j * HD);  // its row j
      Vec v[kChunk];
#pragma GCC unroll 16
      for (int i = 0; i < kChunk; ++i) v[i] = vwiden<D>(values + j * HD + (c + i) * kLanes);
#pragma GCC unroll 16
      for (int g = 0; g < NH; ++g) {
        const Vec wj = vset1(w[g][j]);
#pragma GCC unroll 16
        for (int i = 0; i < kChunk; ++i) out[g][i] = vfma(wj, v[i], out[g][i]);
      }
    }
#pragma GCC unroll 16
    for (int g = 0; g < NH; ++g) {
#pragma GCC unroll 16
      for (int i = 0; i < kChunk; ++i) vstore(ac + g * HD + (c + i) * kLanes, out[g][i]);
    }
  }
}

// A full block of kKeyTile keys for the nh query heads of one KV head, head_dim HD:
// block_update_heads over kHeadsAtOnce<HD> heads at a time (fewer for the last ones).
template <int HD, KvDType D>
inline void full_block_update(const float* q, const KvElem<D>* keys, int64_t key_stride, const KvElem<D>* values,
                              int32_t nh, float scale, float* ac, float* running_max, float* running_sum,
                              const KvElem<D>* next_keys, const KvElem<D>* next_values) {
  constexpr int kHeads = kHeadsAtOnce<HD>;
  for (int32_t g = 0; g < nh;) {
    const int32_t m = std::min<int32_t>(kHeads, nh - g);
    const auto update = [&]<int NH>() {
      block_update_heads<HD, NH, D>(q + g * HD, keys, key_stride, values, scale, ac + g * HD, running_max + g,
                                    running_sum + g, next_keys, next_values);
    };
    if (m == kHeads) {
      update.template operator()<kHeads>();
    } else if constexpr (kHeads == 4) {
      if (m == 3) {
        update.template operator()<3>();
      } else if (m == 2) {
        update.template operator()<2>();
      } else {
        update.template operator()<1>();
      }
    } else {
      update.template operator()<1>();
    }
    g += m;
  }
}
#endif

template <KvDType D>
void attention_typed(const hearth::kernels::AttentionParams& p, int32_t head_begin, int32_t head_end) {
  constexpr bool kWiden = D != KvDType::kF32;
  const int32_t group = p.n_heads / p.n_kv_heads;
  const int32_t hd = p.head_dim;
  const int64_t bs = p.block_size;
  // The state of the query heads computed together: output rows [heads, hd], running
  // maximum and sum of each.
  alignas(64) float acc[kStateFloats];
  float running_max[kStateHeads], running_sum[kStateHeads];
  float score[kMaxBlockSize];
  // A narrow cache's block of one KV head, widened once for all the query heads that read it.
  alignas(64) float key_tile[kWiden ? kWidenTile : 1];    // [hd, n]
  alignas(64) float value_tile[kWiden ? kWidenTile : 1];  // [n, hd]
  const int32_t most_heads = std::min<int32_t>(kStateHeads, kStateFloats / hd);
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = hearth::kernels::attention_first_key(pos, p.sliding_window);
    // As many heads at a time as the state holds (all of them, for the usual models),
    // each block of keys visited once for all of them: the block's heads lie side by
    // side in memory, so the pass streams through each block, and the query heads that
    // share a KV head read its keys and values from memory once (then from L1).
    for (int32_t hb = head_begin; hb < head_end;) {
      const int32_t he = std::min(head_end, hb + most_heads);
      for (int32_t g = 0; g < he - hb; ++g) {
        running_max[g] = -INFINITY;
        running_sum[g] = 0.0f;
        for (int32_t i = 0; i < hd; ++i) acc[g * hd + i] = 0.0f;
      }
      for (int32_t k0 = first; k0 <= pos;) {
        // Keys k0..k1-1 lie in one cache block.
        const int32_t in_block = k0 % p.block_size;
        const int32_t k1 = std::min({pos + 1, k0 - in_block + p.block_size, k0 + kMaxBlockSize});
        const int32_t n = k1 - k0;
        const int64_t block = p.block_table[k0 / p.block_size];
        for (int32_t h0 = hb; h0 < he;) {
          // Query heads h0..h1-1 share KV head kv_head.
          const int32_t kv_head = h0 / group;
          const int32_t h1 = std::min(he, (kv_head + 1) * group);
          const int32_t nh = h1 - h0, g0 = h0 - hb;
          const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h0) * hd;  // [nh, hd]
          // keys[d * block_size + j]: the block's keys of this head, transposed.
          const KvElem<D>* keys =
              static_cast<const KvElem<D>*>(p.k_cache) +
              hearth::kernels::kv_key_index(block, kv_head, 0, in_block, p.n_kv_heads, hd, p.block_size);
          const KvElem<D>* values =
              static_cast<const KvElem<D>*>(p.v_cache) +
              hearth::kernels::kv_value_index(block, kv_head, in_block, p.n_kv_heads, hd, p.block_size);
          bool done = false;
#if defined(__AVX2__)
          // The common shapes: the heads' rows in registers (scores without soft-capping).
          if (n == kKeyTile && (hd == 64 || hd == 128) && !(p.softcap > 0.0f)) {
            // The block the next keys lie in (this one at the end): its part for this KV
            // head is fetched while this one is computed. Nothing else would fetch it: the
            // next block lies anywhere in memory, where no hardware prefetcher follows.
            const int64_t next_block = k1 % p.block_size == 0 && k1 <= pos ? p.block_table[k1 / p.block_size] : block;
            const KvElem<D>* next_keys =
                static_cast<const KvElem<D>*>(p.k_cache) +
                hearth::kernels::kv_key_index(next_block, kv_head, 0, 0, p.n_kv_heads, hd, p.block_size);
            const KvElem<D>* next_values =
                static_cast<const KvElem<D>*>(p.v_cache) +
                hearth::kernels::kv_value_index(next_block, kv_head, 0, p.n_kv_heads, hd, p.block_size);
            if (hd == 64) {
              full_block_update<64, D>(q, keys, bs, values, nh, p.scale, acc + g0 * hd, running_max + g0,
                                       running_sum + g0, next_keys, next_values);
            } else {
              full_block_update<128, D>(q, keys, bs, values, nh, p.scale, acc + g0 * hd, running_max + g0,
                                        running_sum + g0, next_keys, next_values);
            }
            done = true;
          }
#endif
          if constexpr (kWiden) {
            if (!done && static_cast<int64_t>(hd) * n <= kWidenTile) {
              // Widened once into tiles laid out like an f32 cache's block (keys at
              // stride n), then the f32 update itself for each head.
              for (int32_t d = 0; d < hd; ++d) kv_widen<D>(keys + d * bs, n, key_tile + static_cast<int64_t>(d) * n);
              kv_widen<D>(values, n * hd, value_tile);  // the block's rows k0..k1-1 are contiguous
              for (int32_t g = g0; g < g0 + nh; ++g) {
                block_update<KvDType::kF32>(q + static_cast<int64_t>(g - g0) * hd, key_tile, n, value_tile, n, hd,
                                            p.scale, p.softcap, score, acc + g * hd, running_max[g],
                                            running_sum[g]);
              }
              done = true;
            }
          }
          if (!done) {  // f32, or a block too large for the tiles: widened a row at a time per head
            for (int32_t g = g0; g < g0 + nh; ++g) {
              block_update<D>(q + static_cast<int64_t>(g - g0) * hd, keys, bs, values, n, hd, p.scale, p.softcap,
                              score, acc + g * hd, running_max[g], running_sum[g]);
            }
          }
          h0 = h1;
        }
        k0 = k1;
      }
      for (int32_t g = 0; g < he - hb; ++g) {
        float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + hb + g) * hd;
        const float inv = 1.0f / running_sum[g];
        for (int32_t i = 0; i < hd; ++i) out[i] = acc[g * hd + i] * inv;
      }
      hb = he;
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
