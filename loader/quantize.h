// Converting float32 rows into hearth's weight formats, with ggml's reference rules for
// the block formats (so files written here are byte-identical to llama.cpp's):
// Q8_0 d = max|x| / 127, q = round(x / d); Q4_0 d = (the value of largest magnitude) / -8,
// q = min(15, trunc(x / d + 8.5)). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/dtype.h"

namespace hearth {

// Writes n values (a whole number of blocks for Q8_0/Q4_0) of `type` to dst, which holds
// dtype_bytes(type, n) bytes. Plain layouts only (R16 layouts are repacked from these).
void quantize_row(DType type, const float* src, int64_t n, std::byte* dst);

// The same for a whole tensor, into a new buffer.
std::vector<std::byte> quantize(DType type, std::span<const float> src);

}  // namespace hearth
