#include "kernels/cpu/matmul.h"

#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include "common/check.h"
#include "common/half.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_paths.h"
#include "kernels/cpu/repack.h"

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

// Eight partial sums keep the loop free of a serial dependency.
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

// Quantized rows: one fused multiply-add per block, in block order, which is what the
// vector paths compute per row for the R16 layouts; so on those layouts every path gives
// bit-identical results (the plain-layout vector kernels add blocks in another order).
float dot_q8_0(const BlockQ8_0* w, const int8_t* xq, const float* xd, int64_t n_blocks) {
  const float* lut = fp16_table();
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < kQ8_0BlockSize; ++j) isum += static_cast<int32_t>(w[b].qs[j]) * xq[b * 32 + j];
    acc = std::fma(static_cast<float>(isum), lut[w[b].d] * xd[b], acc);
  }
  return acc;
}

float dot_q4_0(const BlockQ4_0* w, const int8_t* xq, const float* xd, int64_t n_blocks) {
  const float* lut = fp16_table();
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      isum += ((w[b].qs[j] & 0x0f) - 8) * xq[b * 32 + j];
      isum += ((w[b].qs[j] >> 4) - 8) * xq[b * 32 + j + 16];
    }
    acc = std::fma(static_cast<float>(isum), lut[w[b].d] * xd[b], acc);
  }
  return acc;
}

}  // namespace

size_t quantized_activation_bytes(int64_t n_tokens, int64_t cols) {
  const auto blocks = static_cast<size_t>(n_tokens * (cols / 32));
  return static_cast<size_t>(n_tokens * cols) + 4 * blocks * sizeof(float) + 64;
}

QuantizedActivations quantized_activations_view(int64_t n_tokens, int64_t cols, void* scratch) {
  QuantizedActivations q;
  q.cols = cols;
  q.n_tokens = n_tokens;
  const int64_t blocks = cols / 32;
  auto* base = static_cast<std::byte*>(scratch);
  q.d = reinterpret_cast<float*>(base);
  q.s = q.d + n_tokens * blocks;
  q.offset4 = reinterpret_cast<int32_t*>(q.s + n_tokens * blocks);
  q.offset8 = q.offset4 + n_tokens * blocks;
  q.qs = reinterpret_cast<int8_t*>(q.offset8 + n_tokens * blocks);
  return q;
}

void quantize_activation_rows(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end) {
  if (cpu_isa() == CpuIsa::kAvx512) {
    quantize_rows_avx512(x, q, t_begin, t_end);
  } else {
    quantize_rows_scalar(x, q, t_begin, t_end);
  }
}

void quantize_rows_scalar(const float* x, const QuantizedActivations& q, int64_t t_begin, int64_t t_end) {
  const int64_t cols = q.cols;
  const int64_t blocks = cols / 32;
  for (int64_t t = t_begin; t < t_end; ++t) {
    for (int64_t b = 0; b < blocks; ++b) {
      const float* v = x + t * cols + b * 32;
      float amax = 0.0f;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int8_t* out = q.qs + t * cols + b * 32;
      int32_t sum = 0;
      for (int j = 0; j < 32; ++j) {
        // Round to nearest even without a libm call: |v * id| <= 127 is far below 2^22.
        constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
        out[j] = static_cast<int8_t>((v[j] * id + kMagic) - kMagic);
        sum += out[j];
      }
      q.d[t * blocks + b] = d;
      q.s[t * blocks + b] = d * static_cast<float>(sum);
      q.offset4[t * blocks + b] = -8 * sum;
      q.offset8[t * blocks + b] = -128 * sum;
    }
  }
}

QuantizedActivations quantize_activations(const float* x, int64_t n_tokens, int64_t cols, void* scratch) {
  QuantizedActivations q = quantized_activations_view(n_tokens, cols, scratch);
  quantize_activation_rows(x, q, 0, n_tokens);
  return q;
}

bool matmul_uses_quantized_activations(DType type) {
  const DType plain = dtype_plain(type);
  return plain == DType::kQ8_0 || plain == DType::kQ4_0;
}

void matmul_rows_scalar(const MatmulParams& params, int64_t row_begin, int64_t row_end) {
  MatmulParams p = params;
  const bool interleaved = dtype_row_group(p.type) > 1;
  p.type = dtype_plain(p.type);
  const uint64_t row_bytes = *dtype_bytes(p.type, p.cols);
  const float* lut = fp16_table();
  const int64_t blocks = p.cols / 32;
  thread_local std::vector<std::byte> unpacked;  // one R16 row in its plain layout
  if (interleaved && unpacked.size() < row_bytes) unpacked.resize(row_bytes);
  for (int64_t r = row_begin; r < row_end; ++r) {
    const std::byte* row = static_cast<const std::byte*>(p.w) + static_cast<uint64_t>(r) * row_bytes;
    if (interleaved) {
      unpack_row_r16(params.type, p.w, p.cols, r, unpacked.data());
      row = unpacked.data();
    }
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      const float* x = p.x + t * p.cols;
      float y = 0.0f;
      switch (p.type) {
        case DType::kF32: {
          const auto* w = reinterpret_cast<const float*>(row);
          y = dot8(x, p.cols, [w](int64_t i) { return w[i]; });
          break;
        }
        case DType::kF16: {
          const auto* w = reinterpret_cast<const uint16_t*>(row);
          y = dot8(x, p.cols, [w, lut](int64_t i) { return lut[w[i]]; });
          break;
        }
        case DType::kBF16: {
          const auto* w = reinterpret_cast<const uint16_t*>(row);
          y = dot8(x, p.cols, [w](int64_t i) { return bf16_to_f32(w[i]); });
          break;
        }
        case DType::kQ8_0:
          y = dot_q8_0(reinterpret_cast<const BlockQ8_0*>(row), p.xq->qs + t * p.cols, p.xq->d + t * blocks, blocks);
          break;
        case DType::kQ4_0:
          y = dot_q4_0(reinterpret_cast<const BlockQ4_0*>(row), p.xq->qs + t * p.cols, p.xq->d + t * blocks, blocks);
          break;
        default: break;  // R16 types were mapped to their plain layout above
      }
      p.y[t * p.rows + r] = y;
    }
  }
}

void matmul_rows(const MatmulParams& params, int64_t row_begin, int64_t row_end) {
  MatmulParams p = params;
  p.row_bytes = *dtype_bytes(p.type, p.cols);
  // The calibrated distance is the best for decode, where the weights stream at full
  // bandwidth. A batched step is bound by arithmetic and reads them at a fifth of that
  // rate, too slowly for the hardware prefetchers to run ahead: without software
  // prefetch a 16-token Q4_0 step from memory ran at 60% of its speed from L3 (Zen 5).
  const int calibrated = weight_prefetch_bytes();
  p.prefetch_bytes = p.n_tokens > 1 && calibrated == 0 ? kDefaultPrefetchBytes : calibrated;
  HEARTH_CHECK(dtype_row_group(p.type) == 1 || (p.rows % kRowInterleave == 0 && p.cols % 32 == 0))
      << "row-interleaved weights of " << p.rows << " x " << p.cols << " reached the kernels";
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: matmul_rows_avx512(p, row_begin, row_end); return;
    case CpuIsa::kAvx2: matmul_rows_avx2(p, row_begin, row_end); return;
    case CpuIsa::kScalar: matmul_rows_scalar(p, row_begin, row_end); return;
  }
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
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
    case DType::kF16R16:
    case DType::kBF16R16:
      // Rows of interleaved matrices are not contiguous; callers unpack them with
      // unpack_row_r16. Models never use these layouts for row lookups.
      for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
      return;
  }
}

}  // namespace hearth::kernels::cpu
