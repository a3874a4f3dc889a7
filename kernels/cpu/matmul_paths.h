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

// Tokens a row is multiplied with at once (weights loaded once per group).
inline constexpr int kTokenGroup = 4;

}  // namespace hearth::kernels::cpu
