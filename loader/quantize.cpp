#include "loader/quantize.h"

#include <cmath>
#include <cstring>

#include "common/check.h"
#include "common/half.h"

namespace hearth {

void quantize_row(DType type, const float* src, int64_t n, std::byte* dst) {
  HEARTH_CHECK(dtype_row_group(type) == 1) << "quantize_row writes plain rows; repack R16 layouts afterwards";
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::kF16:
    case DType::kBF16: {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = type == DType::kF16 ? f32_to_fp16(src[i]) : f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* b = reinterpret_cast<BlockQ8_0*>(dst);
      for (int64_t k = 0; k < n / kQ8_0BlockSize; ++k) {
        const float* x = src + k * kQ8_0BlockSize;
        float amax = 0.0f;
        for (int j = 0; j < kQ8_0BlockSize; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[k].d = f32_to_fp16(d);
        for (int j = 0; j < kQ8_0BlockSize; ++j) b[k].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* b = reinterpret_cast<BlockQ4_0*>(dst);
      for (int64_t k = 0; k < n / kQ4_0BlockSize; ++k) {
        const float* x = src + k * kQ4_0BlockSize;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < kQ4_0BlockSize; ++j) {
          if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        b[k].d = f32_to_fp16(d);
        for (int j = 0; j < kQ4_0BlockSize / 2; ++j) {
          const auto q0 = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j] * id + 8.5f)));
          const auto q1 = static_cast<uint8_t>(std::min(15, static_cast<int>(x[j + 16] * id + 8.5f)));
          b[k].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
    case DType::kF16R16:
    case DType::kBF16R16: return;  // refused above
  }
}

std::vector<std::byte> quantize(DType type, std::span<const float> src) {
  std::vector<std::byte> out(*dtype_bytes(type, static_cast<int64_t>(src.size())));
  quantize_row(type, src.data(), static_cast<int64_t>(src.size()), out.data());
  return out;
}

}  // namespace hearth
