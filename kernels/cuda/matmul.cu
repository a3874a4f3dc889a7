// Matrix products y = x w^T: one warp per output row and token, the weights dequantized
// in registers as they are read (dev:: functions). Q8_0/Q4_0 take int8 activations, a
// block of 32 values per scale, quantized once per call into the scratch buffer, and
// sum integer products per block as reference::matmul does.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/device_math.h"

namespace hearth::kernels::cuda {
namespace {

// Quantized activations: n_tokens * cols int8 values, then one float scale per block.
struct ActView {
  int8_t* q;
  float* d;
};

ActView act_view(void* scratch, int64_t n_tokens, int64_t cols) {
  auto* base = static_cast<int8_t*>(scratch);
  const int64_t q_bytes = (n_tokens * cols + 15) / 16 * 16;
  return {base, reinterpret_cast<float*>(base + q_bytes)};
}

__global__ void float_matvec_kernel(DType type, const std::byte* w, int64_t row_bytes, int64_t rows, int64_t cols,
                                    const float* x, int64_t n_tokens, float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (r >= rows) return;
  const std::byte* row = w + r * row_bytes;
  for (int64_t t = blockIdx.y; t < n_tokens; t += gridDim.y) {
    const float* xt = x + t * cols;
    float sum = 0.0f;
    for (int64_t c = lane; c < cols; c += 32) sum += dev::float_row_value(type, row, c) * xt[c];
    sum = warp_sum(sum);
    if (lane == 0) y[t * rows + r] = sum;
  }
}

// A warp per block of 32 activations: d = max|x| / 127, q = rint(x / d).
__global__ void act_quant_kernel(const float* x, int64_t n_blocks, ActView out) {
  const int lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (b >= n_blocks) return;
  const float v = x[b * 32 + lane];
  const float amax = warp_max(fabsf(v));
  const float d = dev::act_block_scale(amax);
  out.q[b * 32 + lane] = static_cast<int8_t>(dev::act_quantize(v, d));
  if (lane == 0) out.d[b] = d;
}

// Each lane sums whole blocks of 32 (integer products, then d_w * d_x in float), the
// warp adds the lanes' sums.
template <typename Block>
__global__ void quant_matvec_kernel(const Block* w, int64_t rows, int64_t cols, ActView xq, int64_t n_tokens,
                                    float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t blocks = cols / 32;
  const Block* row = w + r * blocks;
  for (int64_t t = blockIdx.y; t < n_tokens; t += gridDim.y) {
    const int8_t* qt = xq.q + t * cols;
    const float* dt = xq.d + t * blocks;
    float sum = 0.0f;
    for (int64_t b = lane; b < blocks; b += 32) {
      int32_t isum = 0;
      for (int j = 0; j < 32; ++j) {
        int32_t wq;
        if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) {
          wq = dev::q8_0_int(row[b], j);
        } else {
          wq = dev::q4_0_int(row[b], j);
        }
        isum += wq * static_cast<int32_t>(qt[b * 32 + j]);
      }
      sum += (fp16_to_f32(row[b].d) * dt[b]) * static_cast<float>(isum);
    }
    sum = warp_sum(sum);
    if (lane == 0) y[t * rows + r] = sum;
  }
}

}  // namespace

size_t matmul_scratch_bytes(DType type, int64_t n_tokens, int64_t cols) {
  if (type != DType::kQ8_0 && type != DType::kQ4_0) return 0;
  const auto q_bytes = static_cast<size_t>((n_tokens * cols + 15) / 16 * 16);
  return q_bytes + static_cast<size_t>(n_tokens * (cols / 32)) * sizeof(float);
}

cudaError_t matmul(const MatmulParams& p, cudaStream_t stream) {
  if (p.rows <= 0 || p.n_tokens <= 0) return cudaSuccess;
  const LaunchShape s = matvec_launch(p.rows, p.n_tokens);
  switch (p.type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16: {
      const int64_t row_bytes = p.cols * (p.type == DType::kF32 ? 4 : 2);
      float_matvec_kernel<<<to_dim3(s.grid), to_dim3(s.block), 0, stream>>>(
          p.type, static_cast<const std::byte*>(p.w), row_bytes, p.rows, p.cols, p.x, p.n_tokens, p.y);
      return launched();
    }
    case DType::kQ8_0:
    case DType::kQ4_0: {
      if (p.cols % 32 != 0) return cudaErrorInvalidValue;
      if (p.scratch == nullptr || p.scratch_bytes < matmul_scratch_bytes(p.type, p.n_tokens, p.cols)) {
        return cudaErrorInvalidValue;
      }
      const ActView xq = act_view(p.scratch, p.n_tokens, p.cols);
      const int64_t n_blocks = p.n_tokens * (p.cols / 32);
      const LaunchShape q = act_quant_launch(p.n_tokens, p.cols);
      act_quant_kernel<<<to_dim3(q.grid), to_dim3(q.block), 0, stream>>>(p.x, n_blocks, xq);
      if (const cudaError_t e = launched(); e != cudaSuccess) return e;
      if (p.type == DType::kQ8_0) {
        quant_matvec_kernel<<<to_dim3(s.grid), to_dim3(s.block), 0, stream>>>(static_cast<const BlockQ8_0*>(p.w),
                                                                               p.rows, p.cols, xq, p.n_tokens, p.y);
      } else {
        quant_matvec_kernel<<<to_dim3(s.grid), to_dim3(s.block), 0, stream>>>(static_cast<const BlockQ4_0*>(p.w),
                                                                               p.rows, p.cols, xq, p.n_tokens, p.y);
      }
      return launched();
    }
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
      return cudaErrorNotSupported;  // the CPU's interleaved rows: the loader writes plain ones with --layout plain
  }
  return cudaErrorNotSupported;
}

}  // namespace hearth::kernels::cuda
