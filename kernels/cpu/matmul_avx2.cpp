// matmul_rows on AVX2 + FMA + F16C. Compiled with those target flags; only called when
// the CPU has them (isa.h). Float weights go in 2-row x 4-token tiles (decode of plain
// rows: a row at a time); a quantized row is multiplied with up to kTokenGroup tokens at
// once, so each weight vector is unpacked once per group.
#include <immintrin.h>

#include "kernels/cpu/matmul_paths.h"

namespace hearth::kernels::cpu {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Float weights (F32, or F16/BF16 widened on the fly): a tile of R rows times T tokens
// over the columns [k0, k1), one vector accumulator per output reduced once per column
// block (the same arithmetic whatever R and T are, so a token's result does not depend
// on the batch around it). The column tail goes through zero-padded copies.
inline __m256 load_w(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load_w(const uint16_t* p, bool bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

template <int R, int T, bool I, typename W, typename Load>
void tile_float(const W* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t k0, int64_t k1, Load load,
                float* y, int64_t y_stride, bool accumulate) {
  __m256 acc[R][T];
  #pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  }
  auto step = [&](const W* const* wr, const float* const* xr) {
    __m256 wv[R];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) wv[r] = load(wr[r]);
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(xr[t]);
      #pragma GCC unroll 16
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(wv[r], xv, acc[r][t]);
    }
  };
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    const W* wr[R];
    const float* xr[T];
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      // The next tile's rows at this column, one prefetch per cache line.
      if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) prefetch_lines(w + (r + R) * row_stride + col_at<I>(k), 64);
      wr[r] = w + r * row_stride + col_at<I>(k);
    }
    #pragma GCC unroll 16
    for (int t = 0; t < T; ++t) xr[t] = x + t * x_stride + k;
    step(wr, xr);
  }
  if (k < k1) {
    alignas(32) W wpad[R][8] = {};
    alignas(32) float xpad[T][8] = {};
    const W* wr[R];
    const float* xr[T];
    for (int r = 0; r < R; ++r) {
      for (int64_t i = k; i < k1; ++i) wpad[r][i - k] = w[r * row_stride + col_at<I>(i)];
      wr[r] = wpad[r];
    }
    for (int t = 0; t < T; ++t) {
      for (int64_t i = k; i < k1; ++i) xpad[t][i - k] = x[t * x_stride + i];
      xr[t] = xpad[t];
    }
    step(wr, xr);
  }
  #pragma GCC unroll 16
  for (int t = 0; t < T; ++t) {
    #pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const float v = hsum(acc[r][t]);
      y[t * y_stride + r] = accumulate ? y[t * y_stride + r] + v : v;
    }
  }
}

template <int R, bool I, typename W, typename Load>
void tile_float_tokens(int64_t n, const W* w, int64_t row_stride, const float* x, int64_t x_stride, int64_t k0,
                       int64_t k1, Load load, float* y, int64_t y_stride, bool accumulate) {
  switch (n) {
    case 1: tile_float<R, 1, I>(w, row_stride, x, x_stride, k0, k1, load, y, y_stride, accumulate); return;
    case 2: tile_float<R, 2, I>(w, row_stride, x, x_stride, k0, k1, load, y, y_stride, accumulate); return;
    case 3: tile_float<R, 3, I>(w, row_stride, x, x_stride, k0, k1, load, y, y_stride, accumulate); return;
    default: tile_float<R, 4, I>(w, row_stride, x, x_stride, k0, k1, load, y, y_stride, accumulate); return;
  }
}

// One column block [k0, k1) of a row with one token: tile_float<1, 1>'s operations (the
// tail through zero-padded copies), with the decode's own prefetch distance.
template <typename W, typename Load>
float decode_float_block(const W* row, const float* x, int64_t k0, int64_t k1, int prefetch_bytes, Load load) {
  __m256 acc = _mm256_setzero_ps();
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) prefetch_ahead(row + k, 64, prefetch_bytes);
    acc = _mm256_fmadd_ps(load(row + k), _mm256_loadu_ps(x + k), acc);
  }
  if (k < k1) {
    alignas(32) W wpad[8] = {};
    alignas(32) float xpad[8] = {};
    for (int64_t i = k; i < k1; ++i) {
      wpad[i - k] = row[i];
      xpad[i - k] = x[i];
    }
    acc = _mm256_fmadd_ps(load(wpad), _mm256_loadu_ps(xpad), acc);
  }
  return hsum(acc);
}

// Decode (one token) on plain rows: a row at a time, front to back, so each thread's
// range is one sequential stream (4-row tiles over 1024-column blocks read 4 rows' 2 KiB
// pieces at a time: 21 GB/s of F16 from memory on one Zen 4 core). A row's whole column
// blocks go two at a time, two accumulator chains side by side, the rest one by one, each
// block's operations those of tile_float, so the result is bit for bit the tiles'.
template <typename W, typename Load>
void decode_float_rows(const W* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load) {
  constexpr int64_t B = kFloatColBlock;
  static_assert(B * sizeof(W) % 64 == 0, "both blocks' chunks start on the same cache-line phase");
  for (int64_t r = row_begin; r < row_end; ++r) {
    const W* row = w + r * p.cols;
    float out = 0.0f;
    int64_t k0 = 0;
    for (; k0 + 2 * B <= p.cols; k0 += 2 * B) {
      __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
      for (int64_t k = k0; k < k0 + B; k += 8) {
        if ((k * static_cast<int64_t>(sizeof(W))) % 64 == 0) {
          prefetch_ahead(row + k, 64, p.prefetch_bytes);
          prefetch_ahead(row + k + B, 64, p.prefetch_bytes);
        }
        a = _mm256_fmadd_ps(load(row + k), _mm256_loadu_ps(p.x + k), a);
        b = _mm256_fmadd_ps(load(row + k + B), _mm256_loadu_ps(p.x + k + B), b);
      }
      const float va = hsum(a), vb = hsum(b);
      out = k0 > 0 ? out + va : va;
      out += vb;
    }
    for (; k0 < p.cols; k0 += B) {
      const int64_t k1 = p.cols - k0 < B ? p.cols : k0 + B;
      const float v = decode_float_block(row, p.x, k0, k1, p.prefetch_bytes, load);
      out = k0 > 0 ? out + v : v;
    }
    p.y[r] = out;
  }
}

// Decode on F16R16/BF16R16: a group's 16 rows at once, chunk after chunk and each row's
// line of a chunk whole, so the matrix is read front to back; the arithmetic is
// tile_float's (bit for bit the plain layout's).
template <typename Load>
void decode_float_r16(const uint16_t* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load) {
  constexpr int G = kRowInterleave;
  float out[G] = {};
  for (int64_t g = row_begin / G; g * G < row_end; ++g) {
    const uint16_t* gw = w + g * G * p.cols;
    for (int64_t k0 = 0; k0 < p.cols; k0 += kFloatColBlock) {
      const int64_t k1 = p.cols - k0 < kFloatColBlock ? p.cols : k0 + kFloatColBlock;
      __m256 acc[G];
      #pragma GCC unroll 16
      for (int i = 0; i < G; ++i) acc[i] = _mm256_setzero_ps();
      for (int64_t k = k0; k < k1; k += 32) {
        const uint16_t* c = gw + col_at<true>(k);
        prefetch_ahead(c, G * 64, p.prefetch_bytes);
        #pragma GCC unroll 16
        for (int i = 0; i < G; ++i) {
          #pragma GCC unroll 4
          for (int q = 0; q < 4; ++q) {
            acc[i] = _mm256_fmadd_ps(load(c + i * 32 + 8 * q), _mm256_loadu_ps(p.x + k + 8 * q), acc[i]);
          }
        }
      }
      #pragma GCC unroll 16
      for (int i = 0; i < G; ++i) {
        const float v = hsum(acc[i]);
        out[i] = k0 > 0 ? out[i] + v : v;
      }
    }
    for (int i = 0; i < G; ++i) {
      const int64_t r = g * G + i;
      if (r >= row_begin && r < row_end) p.y[r] = out[i];
    }
  }
}

// Rows [row_begin, row_end), 64 rows by kFloatColBlock columns at a time (the block's
// weights stay in L2 for every token tile), 2 rows x 4 tokens per tile (16 registers),
// 4 rows x 1 token for a lone last token; never across a group of interleaved rows.
template <bool I, typename W, typename Load>
void matmul_float(const W* w, const MatmulParams& p, int64_t row_begin, int64_t row_end, Load load) {
  constexpr int kRows = 2, kTokens = 4;
  constexpr int64_t kRowBlock = 64;
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
          // A lone token (a batch of 4n + 1): 4 rows at a time, 4 independent chains.
          for (; nt == 1 && r + 4 <= lim; r += 4) {
            tile_float<4, 1, I>(row_at(r), row_stride, x, p.cols, k0, k1, load, y + r, p.rows, k0 > 0);
          }
          for (; r + kRows <= lim; r += kRows) {
            tile_float_tokens<kRows, I>(nt, row_at(r), row_stride, x, p.cols, k0, k1, load, y + r, p.rows, k0 > 0);
          }
          for (; r < lim; ++r) {
            tile_float_tokens<1, I>(nt, row_at(r), row_stride, x, p.cols, k0, k1, load, y + r, p.rows, k0 > 0);
          }
        }
      }
    }
  }
}

template <int N>
void rows_q8_0(const BlockQ8_0* w, const MatmulParams& p, int64_t t0, float* out) {
  const int64_t blocks = p.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[N];
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b, sizeof(BlockQ8_0), p.prefetch_bytes);
    const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i aw = _mm256_sign_epi8(wv, wv);
    const float d = _cvtsh_ss(w[b].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xq->qs + tb * 32));
      const __m256i p16 = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones)), _mm256_set1_ps(d * p.xq->d[tb]),
                               acc[t]);
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) out[t] = hsum(acc[t]);
}

template <int N>
void rows_q4_0(const BlockQ4_0* w, const MatmulParams& p, int64_t t0, float* out) {
  const int64_t blocks = p.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256 acc[N];
  float offset[N];  // sum of d_w * d_x * sum(q_x): the "- 8" of every weight, applied once
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) {
    acc[t] = _mm256_setzero_ps();
    offset[t] = 0.0f;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    prefetch_ahead(w + b, sizeof(BlockQ4_0), p.prefetch_bytes);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
    const float d = _cvtsh_ss(w[b].d);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const int64_t tb = (t0 + t) * blocks + b;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.xq->qs + tb * 32));
      const __m256 s = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(q, xv), ones));
      acc[t] = _mm256_fmadd_ps(s, _mm256_set1_ps(d * p.xq->d[tb]), acc[t]);
      offset[t] += d * p.xq->s[tb];
    }
  }
  #pragma GCC unroll 16
  for (int t = 0; t < N; ++t) out[t] = hsum(acc[t]) - 8.0f * offset[t];
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


// R16 layouts (repack.h): two halves of 8 rows per 256-bit register, activations
// broadcast 4 bytes at a time; maddubs multiplies unsigned by signed bytes, so Q4_0 uses
// its unsigned nibbles with the "- 8 * sum(x)" added in integers, and Q8_0 uses |w|
// with x carrying w's sign.
inline __m256i bcast4(const int8_t* x) {
  int32_t v;
  __builtin_memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

// Ends an integer sum's chain here: GCC otherwise reassociates a chain of vector adds
// into a tree, which keeps all of its products live at once and spills them.
[[gnu::always_inline]] inline __m256i chain(__m256i v) {
  __asm__("" : "+x"(v));
  return v;
}

// One block of a group (16 rows x 32 columns) times N tokens, into integer sums s[2t + h]
// (token t, 8-row half h). Each token's 4 activation bytes are broadcast once and
// multiplied with both halves before the next are read, so the live values are the
// sums, one chunk pair and a broadcast: AVX2 has 16 vector registers, and keeping a
// whole block's broadcasts or chunks live spilled them.
// Q4_0: chunk m of a half holds elements 4m..4m+3 in its low nibbles and 16 + 4m.. in
// its high. Its 8 maddubs products per sum are added in 16 bits (each is at most
// 2 * 15 * 128 = 3840 in magnitude, so 8 fit in int16) and widened once by the caller;
// the integer sums equal widening each one.
template <int N>
void block_sums_q4(const std::byte* o, const int8_t* const* x, __m256i* s) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  #pragma GCC unroll 16
  for (int m = 0; m < 4; ++m) {
    const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 32 + 64 * m));
    const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 64 + 64 * m));
    #pragma GCC unroll 2
    for (int high = 0; high < 2; ++high) {
      const __m256i w0 = _mm256_and_si256(high ? _mm256_srli_epi16(c0, 4) : c0, low4);
      const __m256i w1 = _mm256_and_si256(high ? _mm256_srli_epi16(c1, 4) : c1, low4);
      #pragma GCC unroll 16
      for (int t = 0; t < N; ++t) {
        const __m256i xv = bcast4(x[t] + 16 * high + 4 * m);
        s[2 * t] = chain(_mm256_add_epi16(s[2 * t], _mm256_maddubs_epi16(w0, xv)));
        s[2 * t + 1] = chain(_mm256_add_epi16(s[2 * t + 1], _mm256_maddubs_epi16(w1, xv)));
      }
    }
  }
}

// Q8_0: maddubs multiplies unsigned by signed bytes, so |w| times x carrying w's sign;
// a product pair can reach 2 * 127 * 127, so each is widened to 32 bits at once.
template <int N>
void block_sums_q8(const std::byte* o, const int8_t* const* x, __m256i* s) {
  const __m256i ones = _mm256_set1_epi16(1);
  #pragma GCC unroll 16
  for (int k = 0; k < 8; ++k) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 32 + 64 * k));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(o + 64 + 64 * k));
    const __m256i aw0 = _mm256_sign_epi8(w0, w0);
    const __m256i aw1 = _mm256_sign_epi8(w1, w1);
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) {
      const __m256i xv = bcast4(x[t] + 4 * k);
      const __m256i p0 = _mm256_maddubs_epi16(aw0, _mm256_sign_epi8(xv, w0));
      const __m256i p1 = _mm256_maddubs_epi16(aw1, _mm256_sign_epi8(xv, w1));
      s[2 * t] = chain(_mm256_add_epi32(s[2 * t], _mm256_madd_epi16(p0, ones)));
      s[2 * t + 1] = chain(_mm256_add_epi32(s[2 * t + 1], _mm256_madd_epi16(p1, ones)));
    }
  }
}

// acc[2t + h] = the group's half h times token t0 + t: each block's integer sums
// (Q4_0's widened, plus its "- 8 * sum(x)") scaled by the rows' and the token's scales.
template <int N, bool Q4>
void group_r16(const MatmulParams& p, const std::byte* gw, int64_t t0, __m256* acc) {
  constexpr int64_t kBlockBytes = Q4 ? 288 : 544;
  const int64_t blocks = p.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  #pragma GCC unroll 16
  for (int t = 0; t < 2 * N; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* o = gw + b * kBlockBytes;
    prefetch_ahead(o, kBlockBytes, p.prefetch_bytes);
    const int8_t* x[N];
    #pragma GCC unroll 16
    for (int t = 0; t < N; ++t) x[t] = p.xq->qs + ((t0 + t) * blocks + b) * 32;
    __m256i s[2 * N];
    #pragma GCC unroll 16
    for (int t = 0; t < 2 * N; ++t) s[t] = _mm256_setzero_si256();
    if constexpr (Q4) {
      block_sums_q4<N>(o, x, s);
    } else {
      block_sums_q8<N>(o, x, s);
    }
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m256 scale = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 16 * h)));
      #pragma GCC unroll 16
      for (int t = 0; t < N; ++t) {
        const int64_t tb = (t0 + t) * blocks + b;
        __m256i s32 = s[2 * t + h];
        if constexpr (Q4) s32 = _mm256_add_epi32(_mm256_madd_epi16(s32, ones), _mm256_set1_epi32(p.xq->offset4[tb]));
        acc[2 * t + h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(scale, _mm256_set1_ps(p.xq->d[tb])),
                                         acc[2 * t + h]);
      }
    }
  }
}

template <int N>
void group_r16(const MatmulParams& p, const std::byte* gw, int64_t t0, __m256* acc) {
  if (p.type == DType::kQ4_0R16) {
    group_r16<N, true>(p, gw, t0, acc);
  } else {
    group_r16<N, false>(p, gw, t0, acc);
  }
}

void matmul_rows_r16(const MatmulParams& p, int64_t row_begin, int64_t row_end) {
  const uint64_t group_bytes = p.row_bytes * kRowInterleave;
  __m256 acc[2 * kTokenGroup];
  alignas(32) float out[kRowInterleave];
  for (int64_t g = row_begin / kRowInterleave; g * kRowInterleave < row_end; ++g) {
    const std::byte* gw = static_cast<const std::byte*>(p.w) + static_cast<uint64_t>(g) * group_bytes;
    for (int64_t t0 = 0; t0 < p.n_tokens; t0 += kTokenGroup) {
      const int64_t n = p.n_tokens - t0 < kTokenGroup ? p.n_tokens - t0 : kTokenGroup;
      switch (n) {
        case 1: group_r16<1>(p, gw, t0, acc); break;
        case 2: group_r16<2>(p, gw, t0, acc); break;
        case 3: group_r16<3>(p, gw, t0, acc); break;
        default: group_r16<4>(p, gw, t0, acc); break;
      }
      for (int64_t t = 0; t < n; ++t) {
        _mm256_store_ps(out, acc[2 * t]);
        _mm256_store_ps(out + 8, acc[2 * t + 1]);
        float* y = p.y + (t0 + t) * p.rows + g * kRowInterleave;
        for (int i = 0; i < kRowInterleave; ++i) {
          const int64_t r = g * kRowInterleave + i;
          if (r >= row_begin && r < row_end) y[i] = out[i];
        }
      }
    }
  }
}

}  // namespace

void matmul_rows_avx2(const MatmulParams& p, int64_t row_begin, int64_t row_end) {
  const DType plain = dtype_plain(p.type);
  if (plain == DType::kF32) {
    const auto* w = static_cast<const float*>(p.w);
    auto load = [](const float* q) { return load_w(q); };
    if (p.n_tokens == 1) {
      decode_float_rows(w, p, row_begin, row_end, load);
    } else {
      matmul_float<false>(w, p, row_begin, row_end, load);
    }
    return;
  }
  if (plain == DType::kF16 || plain == DType::kBF16) {
    const auto* w = static_cast<const uint16_t*>(p.w);
    const bool bf16 = plain == DType::kBF16;
    auto load = [bf16](const uint16_t* q) { return load_w(q, bf16); };
    if (p.type == plain && p.n_tokens == 1) {
      decode_float_rows(w, p, row_begin, row_end, load);
    } else if (p.type == plain) {
      matmul_float<false>(w, p, row_begin, row_end, load);
    } else if (p.n_tokens == 1) {
      decode_float_r16(w, p, row_begin, row_end, load);
    } else {
      matmul_float<true>(w, p, row_begin, row_end, load);
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
