#include "common/dtype.h"

namespace hearth {

std::string_view dtype_name(DType type) {
  switch (type) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ8_0R16: return "q8_0r16";
    case DType::kQ4_0R16: return "q4_0r16";
    case DType::kF16R16: return "f16r16";
    case DType::kBF16R16: return "bf16r16";
  }
  return "unknown";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ8_0R16,
                  DType::kQ4_0R16, DType::kF16R16, DType::kBF16R16}) {
    if (dtype_name(t) == name) return t;
  }
  return std::nullopt;
}

int dtype_block_elems(DType type) {
  switch (dtype_plain(type)) {
    case DType::kQ8_0: return kQ8_0BlockSize;
    case DType::kQ4_0: return kQ4_0BlockSize;
    default: return 1;
  }
}

int dtype_row_group(DType type) {
  return dtype_plain(type) != type ? kRowInterleave : 1;
}

DType dtype_plain(DType type) {
  switch (type) {
    case DType::kQ8_0R16: return DType::kQ8_0;
    case DType::kQ4_0R16: return DType::kQ4_0;
    case DType::kF16R16: return DType::kF16;
    case DType::kBF16R16: return DType::kBF16;
    default: return type;
  }
}

int dtype_block_bytes(DType type) {
  switch (type) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ8_0R16: return sizeof(BlockQ8_0);
    case DType::kQ4_0R16: return sizeof(BlockQ4_0);
    case DType::kF16R16: return 2;
    case DType::kBF16R16: return 2;
  }
  return 0;
}

std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<uint64_t> dtype_bytes(DType type, int64_t n) {
  if (n < 0) return std::nullopt;
  const int block = dtype_block_elems(type);
  if (n % block != 0) return std::nullopt;
  return checked_mul(static_cast<uint64_t>(n / block), static_cast<uint64_t>(dtype_block_bytes(type)));
}

}  // namespace hearth
