// Row-interleaved (R16) weight layouts: the same Q8_0 / Q4_0 blocks, stored so that the
// CPU kernels compute 16 rows at once with one broadcast of the activations and no
// horizontal sums. Written once by the loader into the weights segment.
//
// For each group of 16 rows and each block b (32 values) of those rows:
//   Q4_0R16 (288 bytes): the 16 fp16 scales, then 4 chunks m = 0..3 of 64 bytes; chunk m
//     holds bytes 4m..4m+3 of each row's packed nibbles, row after row (so a 32-bit lane
//     is one row, its low nibbles elements 4m..4m+3 and high nibbles 16+4m..16+4m+3).
//   Q8_0R16 (544 bytes): the 16 fp16 scales, then 8 chunks k = 0..7 of 64 bytes; chunk k
//     holds values 4k..4k+3 of each row, row after row.
//   F16R16 / BF16R16 (1 KiB): the 32 values of each row, row after row (64 bytes, one
//     cache line, per row): value c of row 16g + i is element
//     16g * cols + (c / 32) * 512 + 32i + c % 32. A group's rows are one sequential
//     stream in column order, so a decode step reads the matrix front to back.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace hearth::kernels::cpu {

// Whether a [rows, cols] matrix of `type` (Q8_0, Q4_0, F16 or BF16) can take the R16
// layout: rows a multiple of 16, cols of 32.
bool repack_supported(DType type, int64_t rows, int64_t cols);

// The R16 layout of a plain type (Q8_0 -> Q8_0R16, F16 -> F16R16, ...); `type` itself
// when it has none.
DType r16_of(DType type);

// src: [rows, cols] of Q8_0, Q4_0, F16 or BF16; dst: the same number of bytes in the R16
// layout.
void repack_r16(DType type, const void* src, int64_t rows, int64_t cols, void* dst);

// Row `row` of an R16 matrix back in its plain layout (dst: one plain row's bytes).
void unpack_row_r16(DType type, const void* src, int64_t cols, int64_t row, void* dst);

}  // namespace hearth::kernels::cpu
