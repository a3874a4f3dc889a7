// Element types of weight tensors, and the arithmetic on their sizes.
//
// Quantized types are stored in blocks (ggml's layouts): Q8_0 is 32 int8 values with one
// fp16 scale (34 bytes), Q4_0 is 32 4-bit values with one fp16 scale (18 bytes; byte j
// holds element j in its low nibble and element j+16 in its high nibble, w = d*(q-8)).
// The R16 variants hold the same blocks (or, for F16/BF16, the same values) with 16 rows
// interleaved, the resident layout the CPU kernels stream fastest (kernels/cpu/repack.h);
// they need rows % 16 == 0 (and for F16R16/BF16R16 cols % 32 == 0).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hearth {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ8_0R16 = 5,  // Q8_0 blocks, 16 rows interleaved
  kQ4_0R16 = 6,  // Q4_0 blocks, 16 rows interleaved
  kF16R16 = 7,   // F16 values, 16 rows interleaved 32 columns at a time
  kBF16R16 = 8,  // BF16 values, the same
};

inline constexpr int kRowInterleave = 16;

// 16 for the R16 layouts (rows are stored in groups of 16), 1 otherwise.
int dtype_row_group(DType type);
// The plain block type of an R16 layout (itself otherwise).
DType dtype_plain(DType type);

inline constexpr int kQ8_0BlockSize = 32;
inline constexpr int kQ4_0BlockSize = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQ8_0BlockSize];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQ4_0BlockSize / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// "f32", "f16", "bf16", "q8_0", "q4_0", "q8_0r16", "q4_0r16", "f16r16", "bf16r16".
std::string_view dtype_name(DType type);
std::optional<DType> dtype_from_name(std::string_view name);

// Elements per block (1 for plain types) and bytes per block.
int dtype_block_elems(DType type);
int dtype_block_bytes(DType type);

// Bytes of `n` elements; nullopt when n is negative, not a whole number of blocks, or
// the size overflows.
std::optional<uint64_t> dtype_bytes(DType type, int64_t n);

// Multiplies with overflow detection; nullopt on overflow or a negative factor.
std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b);
std::optional<uint64_t> checked_add(uint64_t a, uint64_t b);

}  // namespace hearth
