#include "kernels/cpu/repack.h"

#include <cstring>

namespace hearth::kernels::cpu {
namespace {

constexpr int64_t kGroup = kRowInterleave;

// Byte offset of (group, block) in an R16 matrix.
int64_t group_block_offset(DType plain, int64_t cols, int64_t group, int64_t block) {
  const int64_t blocks = cols / 32;
  return (group * blocks + block) * kGroup * dtype_block_bytes(plain);
}

// F16R16 / BF16R16: a chunk of 32 columns of 16 rows is 16 * 64 bytes.
constexpr int64_t kFloatChunk = 32;
constexpr int64_t kFloatChunkBytes = kGroup * kFloatChunk * 2;

bool is_half(DType plain) { return plain == DType::kF16 || plain == DType::kBF16; }

}  // namespace

bool repack_supported(DType type, int64_t rows, int64_t cols) {
  return (type == DType::kQ8_0 || type == DType::kQ4_0 || is_half(type)) && rows > 0 && rows % kGroup == 0 &&
         cols > 0 && cols % 32 == 0;
}

DType r16_of(DType type) {
  switch (type) {
    case DType::kQ8_0: return DType::kQ8_0R16;
    case DType::kQ4_0: return DType::kQ4_0R16;
    case DType::kF16: return DType::kF16R16;
    case DType::kBF16: return DType::kBF16R16;
    default: return type;
  }
}

void repack_r16(DType type, const void* src, int64_t rows, int64_t cols, void* dst) {
  const int64_t blocks = cols / 32;
  auto* out = static_cast<std::byte*>(dst);
  if (is_half(type)) {
    const auto* in = static_cast<const std::byte*>(src);
    for (int64_t g = 0; g < rows / kGroup; ++g) {
      for (int64_t b = 0; b < blocks; ++b) {
        std::byte* o = out + (g * blocks + b) * kFloatChunkBytes;
        for (int64_t i = 0; i < kGroup; ++i) std::memcpy(o + i * 64, in + ((g * kGroup + i) * cols + b * 32) * 2, 64);
      }
    }
    return;
  }
  for (int64_t g = 0; g < rows / kGroup; ++g) {
    for (int64_t b = 0; b < blocks; ++b) {
      std::byte* o = out + group_block_offset(type, cols, g, b);
      for (int64_t i = 0; i < kGroup; ++i) {
        const int64_t r = g * kGroup + i;
        if (type == DType::kQ4_0) {
          const BlockQ4_0& blk = static_cast<const BlockQ4_0*>(src)[r * blocks + b];
          std::memcpy(o + 2 * i, &blk.d, 2);
          for (int m = 0; m < 4; ++m) std::memcpy(o + 32 + 64 * m + 4 * i, blk.qs + 4 * m, 4);
        } else {
          const BlockQ8_0& blk = static_cast<const BlockQ8_0*>(src)[r * blocks + b];
          std::memcpy(o + 2 * i, &blk.d, 2);
          for (int k = 0; k < 8; ++k) std::memcpy(o + 32 + 64 * k + 4 * i, blk.qs + 4 * k, 4);
        }
      }
    }
  }
}

void unpack_row_r16(DType type, const void* src, int64_t cols, int64_t row, void* dst) {
  const DType plain = dtype_plain(type);
  const int64_t blocks = cols / 32, g = row / kGroup, i = row % kGroup;
  const auto* in = static_cast<const std::byte*>(src);
  if (is_half(plain)) {
    for (int64_t b = 0; b < blocks; ++b) {
      std::memcpy(static_cast<std::byte*>(dst) + b * 64, in + (g * blocks + b) * kFloatChunkBytes + i * 64, 64);
    }
    return;
  }
  for (int64_t b = 0; b < blocks; ++b) {
    const std::byte* o = in + group_block_offset(plain, cols, g, b);
    if (plain == DType::kQ4_0) {
      BlockQ4_0& blk = static_cast<BlockQ4_0*>(dst)[b];
      std::memcpy(&blk.d, o + 2 * i, 2);
      for (int m = 0; m < 4; ++m) std::memcpy(blk.qs + 4 * m, o + 32 + 64 * m + 4 * i, 4);
    } else {
      BlockQ8_0& blk = static_cast<BlockQ8_0*>(dst)[b];
      std::memcpy(&blk.d, o + 2 * i, 2);
      for (int k = 0; k < 8; ++k) std::memcpy(blk.qs + 4 * k, o + 32 + 64 * k + 4 * i, 4);
    }
  }
}

}  // namespace hearth::kernels::cpu
