// matmul_rows on AVX-512 (F, BW, VL, VNNI) + F16C + FMA. Compiled with those target
// flags; only called when the CPU has them (isa.h). A row is multiplied with up to
// kTokenGroup tokens at once, so each weight vector is loaded (and widened or unpacked)
// once per group. Quantized blocks go two at a time into a 512-bit register and are
// multiplied with VNNI (vpdpbusd).
#include <immintrin.h>

#include "kernels/cpu/matmul_paths.h"

namespace hearth::kernels::cpu {
namespace {

inline __m512 load_w(const uint16_t* p, bool bf16) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}
inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// [a x 8 | b x 8]
inline __m512 two_scales(float a, float b) {
  return _mm512_castpd_ps(
      _mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)), _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

// Float weights (F32, or F16/BF16 widened on the fly): a tile of R rows times T tokens,
// over the columns [k0, k1) (the tail by masked loads). Each output keeps one vector
// accumulator and is reduced once per column block, the same arithmetic whatever R
// and T are, so a token's result does not depend on the batch around it.
inline __m512 load_w(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_w(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
inline __m512 load_w(const uint16_t* p, bool bf16, __mmask16 m) {
  const __m256i h = _mm256_maskz_loadu_epi16(m, p);
  if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

template <int R, int T, bool I, typename W, typename Load, typename LoadMasked>
void tile_float(const W* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t k0, int64_t k1,
                Load load, LoadMasked load_masked, float* y, int64_t y_stride, bool accumulate) {
  __m512 acc[R][T];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  }
  int64_t k = k0;
  for (; k + 16 <= k1; k += 16) {
    __m512 wv[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      // The next tile's rows at this column: one tile of streaming ahead.
      if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) prefetch_lines(w + (r + R) * row_stride + col_at<I>(k), 64);
      wv[r] = load(w + r * row_stride + col_at<I>(k));
    }
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(x + t * x_stride + k);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  if (k < k1) {
    const auto m = static_cast<__mmask16>((1u << (k1 - k)) - 1);
    __m512 wv[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load_masked(w + r * row_stride + col_at<I>(k), m);
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + t * x_stride + k);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float v = _mm512_reduce_add_ps(acc[r][t]);
      y[t * y_stride + r] = accumulate ? y[t * y_stride + r] + v : v;
    }
  }
}

template <int R, bool I, typename W, typename Load, typename LoadMasked>
void tile_float_tokens(int64_t n, const W* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t k0,
                       int64_t k1, Load load, LoadMasked load_masked, float* y, int64_t y_stride, bool accumulate) {
  switch (n) {
    case 1: tile_float<R, 1, I>(w, row_stride, x, x_stride, k0, k1, load, load_masked, y, y_stride, accumulate); return;
    case 2: tile_float<R, 2, I>(w, row_stride, x, x_stride, k0, k1, load, load_masked, y, y_stride, accumulate); return;
    case 3: tile_float<R, 3, I>(w, row_stride, x, x_stride, k0, k1, load, load_masked, y, y_stride, accumulate); return;
    default: tile_float<R, 4, I>(w, row_stride, x, x_stride, k0, k1, load, load_masked, y, y_stride, accumulate); return;
  }
}

// One column block [k0, k1) of a row with one token: tile_float<1, 1>'s operations (the
// tail by masked loads), with the decode's own prefetch distance.
template <typename W, typename Load, typename LoadMasked>
[[gnu::always_inline]] inline float decode_float_block(const W* row, const float* x, int64_t k0, int64_t k1,
                                                       int prefetch_bytes, Load load, LoadMasked load_masked) {
  __m512 acc = _mm512_setzero_ps();
  int64_t k = k0;
  for (; k + 16 <= k1; k += 16) {
    if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) prefetch_ahead(row + k, 64, prefetch_bytes);
    acc = _mm512_fmadd_ps(load(row + k), _mm512_loadu_ps(x + k), acc);
  }
  if (k < k1) {
    const auto m = static_cast<__mmask16>((1u << (k1 - k)) - 1);
    acc = _mm512_fmadd_ps(load_masked(row + k, m), _mm512_maskz_loadu_ps(m, x + k), acc);
  }
  return _mm512_reduce_add_ps(acc);
}

// Decode (one token) on plain rows: a row at a time, front to back, so each thread's
// range is one sequential stream (tiles of several rows are several streams, which the
// hardware prefetchers follow worse: measured 27 vs 38 GB/s on one Zen 5 core). The
// arithmetic is tile_float's: one accumulator per column block, reduced and added in
// order. A single accumulator is one chain of dependent multiply-adds (4 cycles each on
// Zen 4: 16 F16 values per 4 cycles, 30 GB/s, from memory and from a mostly cached matrix),
// so two whole column blocks of a row run side by side, two chains with each block's
// own sequence of operations unchanged.
template <typename W, typename Load, typename LoadMasked>
void decode_float_rows(const W* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load,
                       LoadMasked load_masked) {
  constexpr int64_t B = kFloatColBlock;
  static_assert(B * sizeof(W) % 64 == 0, "both blocks' chunks start on the same cache-line phase");
  for (int64_t r = row_begin; r < row_end; ++r) {
    const W* row = w + r * p.cols;
    float out = 0.0f;
    int64_t k0 = 0;
    for (; k0 + 2 * B <= p.cols; k0 += 2 * B) {
      __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
      for (int64_t k = k0; k < k0 + B; k += 16) {
        if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) {
          prefetch_ahead(row + k, 64, p.prefetch_bytes);
          prefetch_ahead(row + k + B, 64, p.prefetch_bytes);
        }
        a = _mm512_fmadd_ps(load(row + k), _mm512_loadu_ps(p.x + k), a);
        b = _mm512_fmadd_ps(load(row + k + B), _mm512_loadu_ps(p.x + k + B), b);
      }
      const float va = _mm512_reduce_add_ps(a), vb = _mm512_reduce_add_ps(b);
      out = k0 > 0 ? out + va : va;
      out += vb;
    }
    for (; k0 < p.cols; k0 += B) {
      const int64_t k1 = p.cols - k0 < B ? p.cols : k0 + B;
      const float v = decode_float_block(row, p.x, k0, k1, p.prefetch_bytes, load, load_masked);
      out = k0 > 0 ? out + v : v;
    }
    p.y[r] = out;
  }
}

// Decode on F16R16/BF16R16: a group's 16 rows at once, chunk after chunk, so the matrix
// is read front to back with one broadcast of the activations per chunk and 16
// independent accumulators. The arithmetic is tile_float's, so the result is bit for bit
// the plain layout's.
template <typename Load>
void decode_float_r16(const uint16_t* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load) {
  constexpr int G = kRowInterleave;
  alignas(64) float out[G] = {};
  for (int64_t g = row_begin / G; g * G < row_end; ++g) {
    const uint16_t* gw = w + g * G * p.cols;
    for (int64_t k0 = 0; k0 < p.cols; k0 += kFloatColBlock) {
      const int64_t k1 = p.cols - k0 < kFloatColBlock ? p.cols : k0 + kFloatColBlock;
      __m512 acc[G];
      #pragma GCC unroll 16
      for (int i = 0; i < G; ++i) acc[i] = _mm512_setzero_ps();
      for (int64_t k = k0; k < k1; k += 32) {
        const uint16_t* c = gw + col_at<true>(k);
        prefetch_ahead(c, G * 64, p.prefetch_bytes);
        const __m512 x0 = _mm512_loadu_ps(p.x + k), x1 = _mm512_loadu_ps(p.x + k + 16);
        #pragma GCC unroll 16
        for (int i = 0; i < G; ++i) {
          acc[i] = _mm512_fmadd_ps(load(c + i * 32), x0, acc[i]);
          acc[i] = _mm512_fmadd_ps(load(c + i * 32 + 16), x1, acc[i]);
        }
      }
      #pragma GCC unroll 16
      for (int i = 0; i < G; ++i) {
        const float v = _mm512_reduce_add_ps(acc[i]);
        out[i] = k0 > 0 ? out[i] + v : v;
      }
    }
    for (int i = 0; i < G; ++i) {
      const int64_t r = g * G + i;
      if (r >= row_begin && r < row_end) p.y[r] = out[i];
    }
  }
}

// Rows [row_begin, row_end) of float weights, 64 rows by kFloatColBlock columns at a
// time, so that a tile's activations stay in L1 while the block's weights (in L2) serve
// every token tile; rows 4 at a time (never across a group of interleaved rows).
template <bool I, typename W, typename Load, typename LoadMasked>
void matmul_float(const W* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load,
                  LoadMasked load_masked) {
  constexpr int kRows = 4, kTokens = 4;
  constexpr int64_t kRowBlock = 64;  // x kFloatColBlock columns: at most 256 KiB of F32 weights, in L2
  // Row r's first element and the distance between the rows of a tile.
  const int64_t row_stride = I ? 32 : p.cols;
  auto row_at = [&](int64_t r) { return w + float_row_at<I>(r, p.cols); };
  for (int64_t rb = row_begin; rb < row_end; rb += kRowBlock) {
    const int64_t re = row_end - rb < kRowBlock ? row_end : rb + kRowBlock;
    for (int64_t k0 = 0; k0 < p.cols; k0 += kFloatColBlock) {
      const int64_t k1 = p.cols - k0 < kFloatColBlock ? p.cols : k0 + kFloatColBlock;
      for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kTokens) {
        const int64_t nt = p.n_tokens - t0 < kTokens ? p.n_tokens - t0 : kTokens;
        const float* x = p.x + t0 * p.cols;
        float* y = p.y + t0 * p.rows;
        for (int64_t r = rb; r < re;) {
          const int64_t group_end = (r / kRowInterleave + 1) * kRowInterleave;
          const int64_t lim = I && group_end < re ? group_end : re;
          for (; r + kRows <= lim; r += kRows) {
            tile_float_tokens<kRows, I>(nt, row_at(r), row_stride, x, p.cols, k0, k1, load, load_masked, y + r, p.rows,
                                        k0 > 0);
          }
          for (; r < lim; ++r) {
            tile_float_tokens<1, I>(nt, row_at(r), row_stride, x, p.cols, k0, k1, load, load_masked, y + r, p.rows,
                                    k0 > 0);
          }
        }
      }
    }
  }
}

// Q8_0 weights times N tokens' quantized activations.
template <int N>
void rows_q8_0(const BlockQ8_0* w, const MatmulParams& p, int64_t t0, float* out) {
  const int64_t blocks = p.cols / 32;
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[N];
  float tail[N];
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) {
    acc[t] = _mm512_setzero_ps();
    tail[t] = 0.0f;
  }
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    prefetch_ahead(w + b, 2 * sizeof(BlockQ8_0), p.prefetch_bytes);
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs));
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    // vpdpbusd multiplies unsigned by signed bytes: |w| times x carrying w's sign.
    const __mmask64 negative = _mm512_movepi8_mask(wv);
    const __m512i aw = _mm512_abs_epi8(wv);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m512i xv = _mm512_loadu_si512(p.xq->qs + tb * 32);
      const __m512i isum = _mm512_dpbusd_epi32(zero, aw, _mm512_mask_sub_epi8(xv, negative, zero, xv));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), two_scales(d0 * p.xq->d[tb], d1 * p.xq->d[tb + 1]), acc[t]);
    }
  }
  for (; b < blocks; ++b) {
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const float d = _cvtsh_ss(w[b].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xq->qs + tb * 32));
      const __m256i isum =
          _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
      tail[t] += d * p.xq->d[tb] * hsum256(_mm256_cvtepi32_ps(isum));
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) out[t] = _mm512_reduce_add_ps(acc[t]) + tail[t];
}

// Q4_0 weights (unsigned nibbles; the "- 8" is applied once through the activation sums).
template <int N>
void rows_q4_0(const BlockQ4_0* w, const MatmulParams& p, int64_t t0, float* out) {
  const int64_t blocks = p.cols / 32;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  __m512 acc[N];
  float tail[N], offset[N];
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) {
    acc[t] = _mm512_setzero_ps();
    tail[t] = offset[t] = 0.0f;
  }
  int64_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    prefetch_ahead(w + b, 2 * sizeof(BlockQ4_0), p.prefetch_bytes);
    const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m128i r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].qs));
    const __m256i v0 = _mm256_set_m128i(_mm_srli_epi16(r0, 4), r0);
    const __m256i v1 = _mm256_set_m128i(_mm_srli_epi16(r1, 4), r1);
    const __m512i q = _mm512_and_si512(_mm512_inserti64x4(_mm512_castsi256_si512(v0), v1, 1), low4);
    const float d0 = _cvtsh_ss(w[b].d), d1 = _cvtsh_ss(w[b + 1].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m512i isum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, _mm512_loadu_si512(p.xq->qs + tb * 32));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), two_scales(d0 * p.xq->d[tb], d1 * p.xq->d[tb + 1]), acc[t]);
      offset[t] += d0 * p.xq->s[tb] + d1 * p.xq->s[tb + 1];
    }
  }
  for (; b < blocks; ++b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0f));
    const float d = _cvtsh_ss(w[b].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xq->qs + tb * 32));
      tail[t] += d * p.xq->d[tb] * hsum256(_mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q, xv)));
      offset[t] += d * p.xq->s[tb];
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) out[t] = _mm512_reduce_add_ps(acc[t]) + tail[t] - 8.0f * offset[t];
}

template <int N>
void row_group(const MatmulParams& p, const std::byte* row, int64_t t0, float* out) {
  switch (p.type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: return;  // computed by matmul_float and decode_float_rows
    case DType::kQ8_0: rows_q8_0<N>(reinterpret_cast<const BlockQ8_0*>(row), p, t0, out); return;
    case DType::kQ4_0: rows_q4_0<N>(reinterpret_cast<const BlockQ4_0*>(row), p, t0, out); return;
    case DType::kQ8_0R16:
    case DType::kQ4_0R16: return;  // computed by whole groups in matmul_rows_r16
    case DType::kF16R16:
    case DType::kBF16R16: return;  // computed by matmul_float and decode_float_r16
  }
}


// R16 layouts (repack.h): 16 rows per 512-bit lane set, activations broadcast 4 bytes at
// a time; the block offsets (- 8 * sum(x) for Q4_0, - 128 * sum(x) for Q8_0 stored as
// biased bytes, QuantizedActivations::offset4/offset8) seed the integer accumulator, so
// each block's sum is exact. In a batched step the loop is bound by how many
// instructions it issues besides the multiplies, so each activation broadcast is folded
// into its vpdpbusd ({1to16}) and the offsets are read ready-made.
inline __m512i dpbusd_bcast(__m512i s, __m512i w, const int8_t* x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(s) : "v"(w), "m"(*reinterpret_cast<const int32_t*>(x)));
  return s;
}

// out[t] = the group's 16 rows times token t0 + t. A block's 8 weight chunks w[k] each
// multiply activations x + 4k (Q4_0: k < 4 the low nibbles, elements 4k..4k+3; k >= 4
// the high ones, 16 + 4(k - 4)..); the N tokens' integer sums are interleaved (N
// independent chains of vpdpbusd), and the accumulators are locals (nothing the loads
// could alias), so all of them stay in registers.
template <int N, bool Q4>
void group_r16(const MatmulParams& p, const std::byte* gw, int64_t t0, __m512* out) {
  constexpr int64_t kBlockBytes = Q4 ? 288 : 544;
  const int64_t blocks = p.cols / 32;
  const int32_t* offsets = Q4 ? p.xq->offset4 : p.xq->offset8;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 a[N];
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) a[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* o = gw + b * kBlockBytes;
    prefetch_ahead(o, kBlockBytes, p.prefetch_bytes);
    const __m512 scale = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(o)));
    __m512i w[8];
    if constexpr (Q4) {
      #pragma GCC unroll 16
      for (int m = 0; m < 4; ++m) {
        const __m512i c = _mm512_loadu_si512(o + 32 + 64 * m);
        w[m] = _mm512_and_si512(c, low4);
        w[m + 4] = _mm512_and_si512(_mm512_srli_epi16(c, 4), low4);
      }
    } else {
      #pragma GCC unroll 16
      for (int k = 0; k < 8; ++k) w[k] = _mm512_xor_si512(_mm512_loadu_si512(o + 32 + 64 * k), bias);  // w + 128
    }
    const int8_t* x[N];
    __m512i s[N];
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      x[t] = p.xq->qs + tb * 32;
      s[t] = _mm512_set1_epi32(offsets[tb]);
    }
    // Token after token within each chunk: N independent chains in flight.
    #pragma GCC unroll 16
    for (int k = 0; k < 8; ++k) {
      #pragma GCC unroll 16
      for (int t = 0; t < N; ++t) s[t] = dpbusd_bcast(s[t], w[k], x[t] + 4 * k);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t]), _mm512_mul_ps(scale, _mm512_set1_ps(p.xq->d[tb])), a[t]);
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) out[t] = a[t];
}

template <bool Q4>
void group_r16_tokens(int64_t n, const MatmulParams& p, const std::byte* gw, int64_t t0, __m512* acc) {
  switch (n) {
    case 1: group_r16<1, Q4>(p, gw, t0, acc); break;
    case 2: group_r16<2, Q4>(p, gw, t0, acc); break;
    case 3: group_r16<3, Q4>(p, gw, t0, acc); break;
    case 4: group_r16<4, Q4>(p, gw, t0, acc); break;
    case 5: group_r16<5, Q4>(p, gw, t0, acc); break;
    case 6: group_r16<6, Q4>(p, gw, t0, acc); break;
    case 7: group_r16<7, Q4>(p, gw, t0, acc); break;
    default: group_r16<8, Q4>(p, gw, t0, acc); break;
  }
}

// Tokens an R16 group's unpacked weights are multiplied with before the next block: 8
// accumulators, 8 integer sums and 8 weight registers fit the 32 vector registers. (16
// tokens in one pass had to run each token's 8 vpdpbusd as one dependent chain, and
// reached 60% of the multiplier; more tokens are further passes over the group, which
// is in L1 or L2 by then.)
constexpr int kR16Tokens = 8;
// Writes acc (the group's 16 rows for n tokens from t0) into y, keeping only the rows
// of [row_begin, row_end) when the range cuts the group.
void store_group(const MatmulParams& p, int64_t g, int64_t t0, int64_t n, int64_t row_begin, int64_t row_end,
                 const __m512* acc) {
  alignas(64) float out[kRowInterleave];
  for (int64_t t = 0; t < n; ++t) {
    float* y = p.y + (t0 + t) * p.rows + g * kRowInterleave;
    if (g * kRowInterleave >= row_begin && (g + 1) * kRowInterleave <= row_end) {
      _mm512_storeu_ps(y, acc[t]);
    } else {
      _mm512_store_ps(out, acc[t]);
      for (int i = 0; i < kRowInterleave; ++i) {
        const int64_t r = g * kRowInterleave + i;
        if (r >= row_begin && r < row_end) y[i] = out[i];
      }
    }
  }
}

void matmul_rows_r16(const MatmulParams& p, int64_t row_begin, int64_t row_end) {
  const uint64_t group_bytes = p.row_bytes * kRowInterleave;
  const int64_t g_begin = row_begin / kRowInterleave, g_end = (row_end + kRowInterleave - 1) / kRowInterleave;
  auto group_w = [&](int64_t g) {
    return static_cast<const std::byte*>(p.w) + static_cast<uint64_t>(g) * group_bytes;
  };
  __m512 acc[kR16Tokens];
  for (int64_t g = g_begin; g < g_end; ++g) {
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kR16Tokens) {
      const int64_t n = p.n_tokens - t0 < kR16Tokens ? p.n_tokens - t0 : kR16Tokens;
      if (p.type == DType::kQ4_0R16) {
        group_r16_tokens<true>(n, p, group_w(g), t0, acc);
      } else {
        group_r16_tokens<false>(n, p, group_w(g), t0, acc);
      }
      store_group(p, g, t0, n, row_begin, row_end, acc);
    }
  }
}

}  // namespace

void quantize_rows_avx512(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end) {
  const int64_t cols = q.cols;
  const int64_t blocks = cols / 32;
  for (int64_t t = t_begin; t < t_end; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* v = x + t * cols + b * 32;
      const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      // cvtps rounds to nearest even (the default MXCSR mode), as the scalar path does.
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
      int8_t* out = q.qs + t * cols + b * 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 16), _mm512_cvtsepi32_epi8(q1));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      q.d[t * blocks + b] = d;
      q.s[t * blocks + b] = d * static_cast<float>(sum);
      q.offset4[t * blocks + b] = -8 * sum;
      q.offset8[t * blocks + b] = -128 * sum;
    }
  }
}

void matmul_rows_avx512(const MatmulParams& p, int64_t row_begin, int64_t row_end) {
  const DType plain = dtype_plain(p.type);
  if (plain == DType::kF32) {
    auto load = [](const float* q) { return load_w(q); };
    auto load_masked = [](const float* q, __mmask16 m) { return load_w(q, m); };
    if (p.n_tokens == 1) {
      decode_float_rows(static_cast<const float*>(p.w), p, row_begin, row_end, load, load_masked);
    } else {
      matmul_float<false>(static_cast<const float*>(p.w), p, row_begin, row_end, load, load_masked);
    }
    return;
  }
  if (plain == DType::kF16 || plain == DType::kBF16) {
    const auto* w = static_cast<const uint16_t*>(p.w);
    const bool bf16 = plain == DType::kBF16;
    auto load = [bf16](const uint16_t* q) { return load_w(q, bf16); };
    auto load_masked = [bf16](const uint16_t* q, __mmask16 m) { return load_w(q, bf16, m); };
    const bool interleaved = p.type != plain;
    if (p.n_tokens == 1) {
      if (interleaved) {
        decode_float_r16(w, p, row_begin, row_end, load);
      } else {
        decode_float_rows(w, p, row_begin, row_end, load, load_masked);
      }
    } else if (interleaved) {
      matmul_float<true>(w, p, row_begin, row_end, load, load_masked);
    } else {
      matmul_float<false>(w, p, row_begin, row_end, load, load_masked);
    }
    return;
  }
  if (dtype_row_group(p.type) > 1) {
    matmul_rows_r16(p, row_begin, row_end);
    return;
  }
  const uint64_t row_bytes = p.row_bytes;
  float out[kTokenGroup];
  for (int64_t r = row_begin; r < row_end; ++r) {
    const std::byte* row = static_cast<const std::byte*>(p.w) + static_cast<uint64_t>(r) * row_bytes;
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kTokenGroup) {
      const int64_t n = p.n_tokens - t0 < kTokenGroup ? p.n_tokens - t0 : kTokenGroup;
      switch (n) {
        case 1: row_group<1>(p, row, t0, out); break;
        case 2: row_group<2>(p, row, t0, out); break;
        case 3: row_group<3>(p, row, t0, out); break;
        default: row_group<4>(p, row, t0, out); break;
      }
      for (int64_t t = 0; t < n; ++t) p.y[(t0 + t) * p.rows + r] = out[t];
    }
  }
}

}  // namespace hearth::kernels::cpu
