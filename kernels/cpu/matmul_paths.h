// The per-instruction-set implementations behind matmul_rows (internal to kernels/cpu).
// Each is compiled with its own target flags and dispatched by cpu_isa(). They keep all
// helpers in anonymous namespaces and use no standard-library templates, so that no
// inline function compiled for a wider instruction set can be picked by the linker for
// code that runs on a narrower CPU.
#pragma once

#include "kernels/cpu/matmul.h"

namespace hearth::kernels::cpu {

void matmul_rows_scalar(const MatmulParams& p, int64_t row_begin, int64_t row_end);
void matmul_rows_avx2(const MatmulParams& p, int64_t row_begin, int64_t row_end);
void matmul_rows_avx512(const MatmulParams& p, int64_t row_begin, int64_t row_end);

// quantize_activation_rows: the scalar path and AVX-512 (bit-identical: the same max,
// scale and round-to-nearest-even).
void quantize_rows_scalar(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end);
void quantize_rows_avx512(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end);

// Tokens a row is multiplied with at once (weights loaded once per group).
inline constexpr int kTokenGroup = 4;

// Columns of float weights multiplied per pass (partial sums are added across passes).
// Every path uses the same blocks, so results do not depend on how a batch is tiled.
inline constexpr int64_t kFloatColBlock = 1024;

// Element offsets in F32/F16/BF16 matrices and their R16 layouts (repack.h), shared by
// the paths (integer arithmetic only). Column k of a row: k in a plain row; in a group
// of interleaved rows, rows are 32 elements apart within 512-element chunks of 32
// columns. Row r's first element: r * cols, or its group's start plus 32 per row before
// it in the group; a tile's rows are then `Interleaved ? 32 : cols` elements apart.
template <bool Interleaved>
static inline int64_t col_at(int64_t k) {
  if constexpr (Interleaved) return (k >> 5) * (kRowInterleave * 32) + (k & 31);
  return k;
}
template <bool Interleaved>
static inline int64_t float_row_at(int64_t r, int64_t cols) {
  if constexpr (Interleaved) return (r / kRowInterleave) * kRowInterleave * cols + (r % kRowInterleave) * 32;
  return r * cols;
}

// Weights stream from memory once per decode step, and the hardware prefetchers stop at
// 4 KiB page boundaries (the weights segment is not huge-page backed). Prefetching each
// cache line `distance` bytes ahead of its use (into L2) can keep the stream going
// across them: on an Intel host 8 KiB gave +30-40% decode on the 1B F16 model at 2
// threads, while on Zen 5 the same prefetches cost up to half the bandwidth of a
// sequential stream. So the distance is a run-time choice (MatmulParams::prefetch_bytes,
// isa.h), 0 for none. `static`: each instruction-set file keeps its own copy.
// Always inlined: GCC 12 otherwise splits prefetch_ahead into an out-of-line part, finds
// that part free of side effects (a prefetch is not one) and deletes every call to it,
// which silently removed the prefetches of all quantized paths.
[[gnu::always_inline]] static inline void prefetch_lines(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int o = 0; o < bytes; o += 64) __builtin_prefetch(c + o, 0, 2);
}
[[gnu::always_inline]] static inline void prefetch_ahead(const void* p, int bytes, int distance) {
  if (distance > 0) prefetch_lines(static_cast<const char*>(p) + distance, bytes);
}

}  // namespace hearth::kernels::cpu
