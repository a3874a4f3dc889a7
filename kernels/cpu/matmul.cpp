#include "kernels/cpu/matmul.h"

#include <array>
#include <memory>

#include "common/half.h"

namespace hearth::kernels::cpu {
namespace {

const float* fp16_table() {
  static const std::unique_ptr<float[]> table = [] {
    auto t = std::make_unique<float[]>(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = fp16_to_f32(static_cast<uint16_t>(i));
    return t;
  }();
  return table.get();
}

// Eight partial sums keep the loop free of a serial dependency and let the compiler
// use vector registers without reassociating a single sum.
template <typename Load>
float dot8(const float* x, int64_t n, Load load) {
  std::array<float, 8> acc{};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += load(i + k) * x[i + k];
  }
  float tail = 0.0f;
  for (; i < n; ++i) tail += load(i) * x[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

float dot_q8_0(const BlockQ8_0* b, const float* x, int64_t n) {
  const float* lut = fp16_table();
  float sum = 0.0f;
  for (int64_t blk = 0; blk < n / kQ8_0BlockSize; ++blk) {
    const float* xb = x + blk * kQ8_0BlockSize;
    std::array<float, 8> acc{};
    for (int j = 0; j < kQ8_0BlockSize; j += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += static_cast<float>(b[blk].qs[j + k]) * xb[j + k];
    }
    const float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    sum += lut[b[blk].d] * s;
  }
  return sum;
}

float dot_q4_0(const BlockQ4_0* b, const float* x, int64_t n) {
  const float* lut = fp16_table();
  float sum = 0.0f;
  for (int64_t blk = 0; blk < n / kQ4_0BlockSize; ++blk) {
    const float* xb = x + blk * kQ4_0BlockSize;
    std::array<float, 8> lo{}, hi{};
    for (int j = 0; j < 16; j += 8) {
      for (int k = 0; k < 8; ++k) {
        const uint8_t q = b[blk].qs[j + k];
        lo[k] += static_cast<float>((q & 0x0f) - 8) * xb[j + k];
        hi[k] += static_cast<float>((q >> 4) - 8) * xb[j + k + 16];
      }
    }
    float s = 0.0f;
    for (int k = 0; k < 8; ++k) s += lo[k] + hi[k];
    sum += lut[b[blk].d] * s;
  }
  return sum;
}

}  // namespace

float fp16_lut(uint16_t h) { return fp16_table()[h]; }

float dot_row(DType type, const void* row, const float* x, int64_t n) {
  switch (type) {
    case DType::kF32: {
      const auto* w = static_cast<const float*>(row);
      return dot8(x, n, [w](int64_t i) { return w[i]; });
    }
    case DType::kF16: {
      const auto* w = static_cast<const uint16_t*>(row);
      const float* lut = fp16_table();
      return dot8(x, n, [w, lut](int64_t i) { return lut[w[i]]; });
    }
    case DType::kBF16: {
      const auto* w = static_cast<const uint16_t*>(row);
      return dot8(x, n, [w](int64_t i) { return bf16_to_f32(w[i]); });
    }
    case DType::kQ8_0: return dot_q8_0(static_cast<const BlockQ8_0*>(row), x, n);
    case DType::kQ4_0: return dot_q4_0(static_cast<const BlockQ4_0*>(row), x, n);
  }
  return 0.0f;
}

void dequantize_row(DType type, const void* row, float* dst, int64_t n) {
  const float* lut = fp16_table();
  switch (type) {
    case DType::kF32: {
      const auto* s = static_cast<const float*>(row);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) dst[i] = lut[s[i]];
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(row);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(row);
      for (int64_t blk = 0; blk < n / kQ8_0BlockSize; ++blk) {
        const float d = lut[b[blk].d];
        for (int j = 0; j < kQ8_0BlockSize; ++j) dst[blk * kQ8_0BlockSize + j] = d * static_cast<float>(b[blk].qs[j]);
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(row);
      for (int64_t blk = 0; blk < n / kQ4_0BlockSize; ++blk) {
        const float d = lut[b[blk].d];
        float* o = dst + blk * kQ4_0BlockSize;
        for (int j = 0; j < 16; ++j) {
          o[j] = d * static_cast<float>((b[blk].qs[j] & 0x0f) - 8);
          o[j + 16] = d * static_cast<float>((b[blk].qs[j] >> 4) - 8);
        }
      }
      return;
    }
  }
}

void matmul_rows(const MatmulParams& p, int64_t row_begin, int64_t row_end, float* scratch) {
  const auto row_bytes = static_cast<int64_t>(*dtype_bytes(p.type, p.cols));
  const auto* w = static_cast<const std::byte*>(p.w);
  if (p.n_tokens == 1) {
    for (int64_t r = row_begin; r < row_end; ++r) p.y[r] = dot_row(p.type, w + r * row_bytes, p.x, p.cols);
    return;
  }
  for (int64_t r = row_begin; r < row_end; ++r) {
    const float* row;
    if (p.type == DType::kF32) {
      row = reinterpret_cast<const float*>(w + r * row_bytes);
    } else {
      dequantize_row(p.type, w + r * row_bytes, scratch, p.cols);
      row = scratch;
    }
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      p.y[t * p.rows + r] = dot8(p.x + t * p.cols, p.cols, [row](int64_t i) { return row[i]; });
    }
  }
}

}  // namespace hearth::kernels::cpu
