// Matrix products y = x w^T for decode-sized batches, streaming the weights: one warp per
// output row and group of up to kMatvecTokens tokens, so a row's weights are read once per
// group and dequantized in registers (dev:: functions). Float rows are read 16 bytes per
// lane at a time where the row and activations are aligned to it. Q8_0/Q4_0 take int8
// activations, a block of 32 values per scale, quantized once per call into the scratch
// buffer: a block's weights are unpacked into eight words of four int8 each, multiplied
// with dev::dot4_i8 (__dp4a) and summed per block as reference::matmul does. Over
// kQuantMmaMinTokens tokens or more, Q8_0/Q4_0 products run on tensor cores instead
// (quant_mma_kernel): the same integer sums per block, by int8 mma.sync.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/mma.cuh"
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

// Each lane sums its columns in order, for each token of the group; the warp adds the
// lanes' sums. `vec`: the row and the activations are 16-byte aligned and the columns a
// multiple of a 16-byte load's values, so a lane reads 16 bytes of weights at a time.
//
// Split (grid.z > 1), block z takes columns [z * split_cols, + split_cols) and writes its
// sums to y + z * n_tokens * rows, which split_sum_kernel adds up in order.
template <DType kType>
__global__ void float_matvec_kernel(const std::byte* w, int64_t row_bytes, int64_t rows, int64_t cols, bool vec,
                                    const float* x, int64_t n_tokens, int64_t split_cols, float* y) {
  constexpr int kPer = kType == DType::kF32 ? 4 : 8;  // values per 16-byte load
  constexpr int kBytes = kType == DType::kF32 ? 4 : 2;
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (r >= rows) return;
  const std::byte* row = w + r * row_bytes;
  const int64_t c0 = blockIdx.z * split_cols, c1 = cols < c0 + split_cols ? cols : c0 + split_cols;
  y += blockIdx.z * n_tokens * rows;
  for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kMatvecTokens); t0 < n_tokens;
       t0 += gridDim.y * static_cast<int64_t>(kMatvecTokens)) {
    const int tokens = static_cast<int>(n_tokens - t0 < kMatvecTokens ? n_tokens - t0 : kMatvecTokens);
    const float* xg = x + t0 * cols;
    float sum[kMatvecTokens];
    for (float& s : sum) s = 0.0f;
    if (vec) {
      // Unrolled so that a lane has several 16-byte weight loads in flight (the sums keep
      // their order).
      HEARTH_UNROLL(4)
      for (int64_t c = c0 + lane * static_cast<int64_t>(kPer); c < c1; c += 32 * kPer) {
        float v[8];
        dev::float_values16(kType, dev::load16(row + c * kBytes), v);
        for (int k = 0; k < kMatvecTokens && k < tokens; ++k) {
          float xv[8];
          for (int h = 0; h < kPer / 4; ++h) {
            const dev::Bytes16 xr = dev::load16(xg + k * cols + c + 4 * h);
            for (int i = 0; i < 4; ++i) xv[4 * h + i] = hd_bits_float(xr.w[i]);
          }
          for (int i = 0; i < kPer; ++i) sum[k] += v[i] * xv[i];
        }
      }
    } else {
      for (int64_t c = c0 + lane; c < c1; c += 32) {
        const float v = dev::float_row_value(kType, row, c);
        for (int k = 0; k < kMatvecTokens && k < tokens; ++k) sum[k] += v * xg[k * cols + c];
      }
    }
    for (int k = 0; k < kMatvecTokens && k < tokens; ++k) {
      const float s = warp_sum(sum[k]);
      if (lane == 0) y[(t0 + k) * rows + r] = s;
    }
  }
}

// A warp per block of 32 activations: d = max|x| / 127, q = rint(x / d). With `up`, the
// activation is silu(x) * up, computed as swiglu does and written to `gated` too.
__global__ void act_quant_kernel(const float* x, const float* up, float* gated, int64_t n_blocks, ActView out) {
  const int lane = threadIdx.x % 32;
  const int64_t b = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (b >= n_blocks) return;
  float v = x[b * 32 + lane];
  if (up != nullptr) {
    v = dev::silu_mul(v, up[b * 32 + lane]);
    gated[b * 32 + lane] = v;
  }
  const float amax = warp_max(fabsf(v));
  const float d = dev::act_block_scale(amax);
  out.q[b * 32 + lane] = static_cast<int8_t>(dev::act_quantize(v, d));
  if (lane == 0) out.d[b] = d;
}

// y[i] = the split ranges' sums of output i, added in range order.
__global__ void split_sum_kernel(const float* parts, int32_t splits, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = parts[i];
    for (int32_t s = 1; s < splits; ++s) sum += parts[s * n + i];
    y[i] = sum;
  }
}

// Each lane takes whole blocks of 32: the block's weights unpacked once into eight
// words of packed int8, then for each token of the group the integer sum of their
// products with its activations (dot4_i8), scaled by d_w * d_x in float; the warp adds
// the lanes' sums.
// Split as float_matvec_kernel is, in whole blocks.
template <typename Block>
__global__ void quant_matvec_kernel(const Block* w, int64_t rows, int64_t cols, ActView xq, int64_t n_tokens,
                                    int64_t split_cols, float* y) {
  const int lane = threadIdx.x % 32;
  const int64_t r = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (r >= rows) return;
  const int64_t blocks = cols / 32;
  const Block* row = w + r * blocks;
  const int64_t b0 = blockIdx.z * split_cols / 32;
  const int64_t b1 = blocks < b0 + split_cols / 32 ? blocks : b0 + split_cols / 32;
  y += blockIdx.z * n_tokens * rows;
  for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kMatvecTokens); t0 < n_tokens;
       t0 += gridDim.y * static_cast<int64_t>(kMatvecTokens)) {
    const int tokens = static_cast<int>(n_tokens - t0 < kMatvecTokens ? n_tokens - t0 : kMatvecTokens);
    float sum[kMatvecTokens];
    for (float& s : sum) s = 0.0f;
    HEARTH_UNROLL(2)
    for (int64_t b = b0 + lane; b < b1; b += 32) {
      uint32_t wq[8];
      for (int i = 0; i < 8; ++i) {
        if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) {
          wq[i] = dev::q8_0_word(row[b], i);
        } else {
          wq[i] = dev::q4_0_word(row[b], i);
        }
      }
      const float dw = fp16_to_f32(row[b].d);
      for (int k = 0; k < kMatvecTokens && k < tokens; ++k) {
        const int64_t t = t0 + k;
        const int8_t* xb = xq.q + t * cols + b * 32;  // 16-byte aligned: cols % 32 == 0
        int32_t isum = 0;
        for (int h = 0; h < 2; ++h) {
          const dev::Bytes16 xr = dev::load16(xb + 16 * h);
          for (int i = 0; i < 4; ++i) isum = dev::dot4_i8(wq[4 * h + i], xr.w[i], isum);
        }
        sum[k] += (dw * xq.d[t * blocks + b]) * static_cast<float>(isum);
      }
    }
    for (int k = 0; k < kMatvecTokens && k < tokens; ++k) {
      const float s = warp_sum(sum[k]);
      if (lane == 0) y[(t0 + k) * rows + r] = s;
    }
  }
}

// A warp's 32 rows by 32 tokens of a tensor-core tile (kQuantMmaWarps = 4 warps, two by
// two): two 16-row by four 8-token accumulators, each element where the fragments' D puts
// it (mma.cuh: rows groupID and groupID + 8, tokens 2 * threadID_in_group and the next).
struct WarpTile {
  int group, in_group;  // the lane's groupID and threadID_in_group
  int wm, wn;           // the warp's first row and token in the tile
  float acc[2][4][4];

  __device__ WarpTile() {
    const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
    group = lane / 4, in_group = lane % 4;
    wm = (warp % 2) * 32, wn = (warp / 2) * 32;
    for (auto& m : acc) {
      for (auto& n : m) {
        for (float& v : n) v = 0.0f;
      }
    }
  }
  // The tile row of element i of a 16-row accumulator mt, and the token of element i of
  // an 8-token one nt.
  __device__ int row(int mt, int i) const { return wm + 16 * mt + group + (i >= 2 ? 8 : 0); }
  __device__ int token(int nt, int i) const { return wn + 8 * nt + 2 * in_group + (i & 1); }
  // y[t, r] of the tile at (r0, t0), the rows and tokens past the ends left out.
  __device__ void store(int64_t r0, int64_t t0, int64_t rows, int64_t n_tokens, float* y) const {
    for (int mt = 0; mt < 2; ++mt) {
      for (int nt = 0; nt < 4; ++nt) {
        for (int i = 0; i < 4; ++i) {
          const int64_t r = r0 + row(mt, i), t = t0 + token(nt, i);
          if (r < rows && t < n_tokens) y[t * rows + r] = acc[mt][nt][i];
        }
      }
    }
  }
};

// Q8_0/Q4_0 products over many tokens on tensor cores. A block computes a tile of
// kQuantMmaRows rows by kQuantMmaTokens tokens. Per stage it copies kQuantMmaStageBlocks
// blocks of 32 columns into shared memory: its rows' weights unpacked to int8 words
// (dev::q8_0_word / q4_0_word), its tokens' quantized activations, and both scales (zeros
// past the last row, token or block). Each warp then takes 32 rows by 32 tokens of the
// tile and, block by block, gets the exact integer sums of a 16 x 8 piece at a time from
// one mma_s8_m16n8k32 and adds (d_w * d_x) * sum to its float accumulators, in block order
// as reference::matmul does.
template <typename Block>
__global__ void __launch_bounds__(32 * kQuantMmaWarps)
    quant_mma_kernel(const Block* w, int64_t rows, int64_t cols, ActView xq, int64_t n_tokens, float* y) {
  constexpr int kStage = kQuantMmaStageBlocks;
  // Words per staged row: 8 per block of 32 int8, and 4 more so that the eight rows a
  // fragment reads start on different banks (row g, word t: bank 4g + t).
  constexpr int kStride = 8 * kStage + 4;
  __shared__ uint32_t ws[kQuantMmaRows * kStride];
  __shared__ uint32_t xs[kQuantMmaTokens * kStride];
  __shared__ float wd[kQuantMmaRows * kStage];
  __shared__ float xd[kQuantMmaTokens * kStage];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t blocks = cols / 32;
  for (int64_t r0 = blockIdx.x * static_cast<int64_t>(kQuantMmaRows); r0 < rows;
       r0 += gridDim.x * static_cast<int64_t>(kQuantMmaRows)) {
    for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kQuantMmaTokens); t0 < n_tokens;
         t0 += gridDim.y * static_cast<int64_t>(kQuantMmaTokens)) {
      WarpTile tile;
      for (int64_t b0 = 0; b0 < blocks; b0 += kStage) {
        const int stage = static_cast<int>(blocks - b0 < kStage ? blocks - b0 : kStage);
        __syncthreads();  // the previous stage is read
        for (int i = tid; i < kQuantMmaRows * kStage * 8; i += static_cast<int>(blockDim.x)) {
          const int r = i / (kStage * 8), kb = i / 8 % kStage, word = i % 8;
          uint32_t v = 0;
          if (r0 + r < rows && kb < stage) {
            const Block& blk = w[(r0 + r) * blocks + b0 + kb];
            if constexpr (sizeof(Block) == sizeof(BlockQ8_0)) {
              v = dev::q8_0_word(blk, word);
            } else {
              v = dev::q4_0_word(blk, word);
            }
          }
          ws[r * kStride + kb * 8 + word] = v;
        }
        for (int i = tid; i < kQuantMmaTokens * kStage * 8; i += static_cast<int>(blockDim.x)) {
          const int t = i / (kStage * 8), kb = i / 8 % kStage, word = i % 8;
          uint32_t v = 0;
          if (t0 + t < n_tokens && kb < stage) {
            v = *reinterpret_cast<const uint32_t*>(xq.q + (t0 + t) * cols + (b0 + kb) * 32 + word * 4);
          }
          xs[t * kStride + kb * 8 + word] = v;
        }
        for (int i = tid; i < kQuantMmaRows * kStage; i += static_cast<int>(blockDim.x)) {
          const int r = i / kStage, kb = i % kStage;
          wd[i] = r0 + r < rows && kb < stage ? fp16_to_f32(w[(r0 + r) * blocks + b0 + kb].d) : 0.0f;
        }
        for (int i = tid; i < kQuantMmaTokens * kStage; i += static_cast<int>(blockDim.x)) {
          const int t = i / kStage, kb = i % kStage;
          xd[i] = t0 + t < n_tokens && kb < stage ? xq.d[(t0 + t) * blocks + b0 + kb] : 0.0f;
        }
        __syncthreads();
        for (int kb = 0; kb < stage; ++kb) {
          uint32_t a[2][4];
          for (int mt = 0; mt < 2; ++mt) {
            const uint32_t* p = ws + (tile.wm + 16 * mt + tile.group) * kStride + kb * 8 + tile.in_group;
            a[mt][0] = p[0];
            a[mt][1] = p[8 * kStride];
            a[mt][2] = p[4];
            a[mt][3] = p[8 * kStride + 4];
          }
          for (int nt = 0; nt < 4; ++nt) {
            const uint32_t* q = xs + (tile.wn + 8 * nt + tile.group) * kStride + kb * 8 + tile.in_group;
            const uint32_t b[2] = {q[0], q[4]};
            for (int mt = 0; mt < 2; ++mt) {
              int32_t d[4] = {0, 0, 0, 0};
              mma_s8_m16n8k32(d, a[mt], b);
              for (int i = 0; i < 4; ++i) {
                const int row = tile.row(mt, i), tok = tile.token(nt, i);
                tile.acc[mt][nt][i] += (wd[row * kStage + kb] * xd[tok * kStage + kb]) * static_cast<float>(d[i]);
              }
            }
          }
        }
      }
      tile.store(r0, t0, rows, n_tokens, y);
    }
  }
}

}  // namespace

size_t matmul_scratch_bytes(DType type, int64_t n_tokens, int64_t cols) {
  if (type != DType::kQ8_0 && type != DType::kQ4_0) return 0;
  const auto q_bytes = static_cast<size_t>((n_tokens * cols + 15) / 16 * 16);
  return q_bytes + static_cast<size_t>(n_tokens * (cols / 32)) * sizeof(float);
}

namespace {

bool quantized(DType type) { return type == DType::kQ8_0 || type == DType::kQ4_0; }

bool takes_mma(const MatmulParams& p) {
  return quantized(p.type) && (p.path == MatmulPath::kTensorCores ||
                               (p.path == MatmulPath::kAuto && p.n_tokens >= kQuantMmaMinTokens));
}

// How many column ranges p's streaming product is split into (1: none).
int32_t product_splits(const MatmulParams& p) {
  if (takes_mma(p) || p.sm_count <= 0) return 1;
  return matvec_splits(p.rows, p.n_tokens, p.cols, p.sm_count);
}

// Where in the scratch the split ranges' sums start: after the quantized activations.
size_t split_offset(const MatmulParams& p) { return (matmul_scratch_bytes(p.type, p.n_tokens, p.cols) + 15) / 16 * 16; }

}  // namespace

size_t matmul_scratch_bytes(const MatmulParams& p) {
  const int32_t splits = product_splits(p);
  if (splits == 1) return matmul_scratch_bytes(p.type, p.n_tokens, p.cols);
  return split_offset(p) + static_cast<size_t>(splits) * static_cast<size_t>(p.n_tokens * p.rows) * sizeof(float);
}

// A thread per output row r: for each tile of columns, the block stages the tile of up to
// kGroupQuantTokens tokens' activations in shared memory, then every thread walks the
// tile's packed words of its row (coalesced across the block: qweight is [cols / pack,
// rows]), dequantizes each value as dev::group_quant_value does and accumulates it into
// each token's sum in column order.
__global__ void group_quant_matvec_kernel(dev::GroupQuantView w, const float* x, int64_t n_tokens, float* y) {
  HEARTH_DYNAMIC_SHARED(float, tile);  // [kGroupQuantTokens][kGroupQuantTileCols]
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int32_t pack = dev::group_quant_pack(w.bits);
  const int64_t zero_words = w.rows / pack;
  for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kGroupQuantTokens); t0 < n_tokens;
       t0 += gridDim.y * static_cast<int64_t>(kGroupQuantTokens)) {
    const int tokens = static_cast<int>(n_tokens - t0 < kGroupQuantTokens ? n_tokens - t0 : kGroupQuantTokens);
    float acc[kGroupQuantTokens] = {};
    for (int64_t c0 = 0; c0 < w.cols; c0 += kGroupQuantTileCols) {
      const int width = static_cast<int>(w.cols - c0 < kGroupQuantTileCols ? w.cols - c0 : kGroupQuantTileCols);
      __syncthreads();  // the previous tile is read
      for (int i = threadIdx.x; i < tokens * width; i += blockDim.x) {
        const int t = i / width, c = i % width;
        tile[t * kGroupQuantTileCols + c] = x[(t0 + t) * w.cols + c0 + c];
      }
      __syncthreads();
      if (r >= w.rows) continue;
      for (int64_t word = c0 / pack; word < (c0 + width) / pack; ++word) {
        const int32_t packed = w.qweight[word * w.rows + r];
        for (int j = 0; j < pack; ++j) {
          const int64_t c = word * pack + j;
          const int32_t g = dev::group_quant_group(w, c);
          const int32_t z = dev::group_quant_unpack(w.qzeros[g * zero_words + r / pack], static_cast<int32_t>(r % pack),
                                                    w.bits);
          const float scale = fp16_to_f32(w.scales[static_cast<int64_t>(g) * w.rows + r]);
          const float v = scale * static_cast<float>(dev::group_quant_unpack(packed, j, w.bits) - (z + w.zero_offset));
          const float* xs = tile + (c - c0);
          for (int t = 0; t < tokens; ++t) acc[t] += v * xs[t * kGroupQuantTileCols];
        }
      }
    }
    if (r < w.rows) {
      for (int t = 0; t < tokens; ++t) y[(t0 + t) * w.rows + r] = acc[t];
    }
  }
}

// Group-quantized (GPTQ-layout) products over many tokens on tensor cores, in the tiles
// of quant_mma_kernel, kGroupQuantMmaCols columns a stage: the block's rows' weights
// dequantized as dev::group_quant_value does and its tokens' activations, both rounded to
// f16, into shared memory (zeros past the last row, token or column); each warp takes 32
// rows by 32 tokens of the tile and accumulates in f32 with mma_f16_m16n8k16, 16 columns
// at a time.
__global__ void __launch_bounds__(32 * kQuantMmaWarps)
    group_quant_mma_kernel(dev::GroupQuantView w, const float* x, int64_t n_tokens, float* y) {
  constexpr int kPairs = kGroupQuantMmaCols / 2;
  // Words (f16 pairs) per staged row, and 4 more so that the eight rows a fragment reads
  // start on different banks (row g, word t: bank 20g + t mod 32).
  constexpr int kStride = kPairs + 4;
  __shared__ uint32_t ws[kQuantMmaRows * kStride];
  __shared__ uint32_t xs[kQuantMmaTokens * kStride];
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t r0 = blockIdx.x * static_cast<int64_t>(kQuantMmaRows); r0 < w.rows;
       r0 += gridDim.x * static_cast<int64_t>(kQuantMmaRows)) {
    for (int64_t t0 = blockIdx.y * static_cast<int64_t>(kQuantMmaTokens); t0 < n_tokens;
         t0 += gridDim.y * static_cast<int64_t>(kQuantMmaTokens)) {
      WarpTile tile;
      for (int64_t c0 = 0; c0 < w.cols; c0 += kGroupQuantMmaCols) {
        __syncthreads();  // the previous stage is read
        // Consecutive threads take consecutive rows, so qweight's words ([cols / pack,
        // rows]) are read together.
        for (int i = tid; i < kQuantMmaRows * kPairs; i += static_cast<int>(blockDim.x)) {
          const int r = i % kQuantMmaRows, pair = i / kQuantMmaRows;
          const int64_t c = c0 + 2 * pair;
          uint32_t v = 0;
          if (r0 + r < w.rows) {
            if (c < w.cols) v = f32_to_fp16(dev::group_quant_value(w, r0 + r, c));
            if (c + 1 < w.cols) v |= static_cast<uint32_t>(f32_to_fp16(dev::group_quant_value(w, r0 + r, c + 1))) << 16;
          }
          ws[r * kStride + pair] = v;
        }
        for (int i = tid; i < kQuantMmaTokens * kPairs; i += static_cast<int>(blockDim.x)) {
          const int t = i / kPairs, pair = i % kPairs;
          const int64_t c = c0 + 2 * pair;
          uint32_t v = 0;
          if (t0 + t < n_tokens) {
            const float* xr = x + (t0 + t) * w.cols;
            if (c < w.cols) v = f32_to_fp16(xr[c]);
            if (c + 1 < w.cols) v |= static_cast<uint32_t>(f32_to_fp16(xr[c + 1])) << 16;
          }
          xs[t * kStride + pair] = v;
        }
        __syncthreads();
        for (int k = 0; k < kPairs; k += 8) {  // 16 columns: 8 words
          uint32_t a[2][4];
          for (int mt = 0; mt < 2; ++mt) {
            const uint32_t* p = ws + (tile.wm + 16 * mt + tile.group) * kStride + k + tile.in_group;
            a[mt][0] = p[0];
            a[mt][1] = p[8 * kStride];
            a[mt][2] = p[4];
            a[mt][3] = p[8 * kStride + 4];
          }
          for (int nt = 0; nt < 4; ++nt) {
            const uint32_t* q = xs + (tile.wn + 8 * nt + tile.group) * kStride + k + tile.in_group;
            const uint32_t b[2] = {q[0], q[4]};
            for (int mt = 0; mt < 2; ++mt) mma_f16_m16n8k16(tile.acc[mt][nt], a[mt], b);
          }
        }
      }
      tile.store(r0, t0, w.rows, n_tokens, y);
    }
  }
}

namespace {

// matmul, and swiglu_matmul's quantized products: with `up`, the activations are
// silu(p.x) * up, written back to `gated` (== p.x) as they are quantized.
cudaError_t product(const MatmulParams& p, const float* up, float* gated, cudaStream_t stream) {
  if (p.rows <= 0 || p.n_tokens <= 0) return cudaSuccess;
  if (p.type == DType::kQ8_0R16 || p.type == DType::kQ4_0R16 || p.type == DType::kF16R16 ||
      p.type == DType::kBF16R16) {
    return cudaErrorNotSupported;  // the CPU's interleaved rows: the loader writes plain ones with --layout plain
  }
  if (!quantized(p.type) && p.type != DType::kF32 && p.type != DType::kF16 && p.type != DType::kBF16) {
    return cudaErrorNotSupported;
  }
  if (quantized(p.type) && p.cols % 32 != 0) return cudaErrorInvalidValue;
  // Split (where the rows are too few to fill the device), the ranges' sums go to the
  // scratch after the quantized activations, 16-byte aligned.
  const int32_t splits = product_splits(p);
  if (p.scratch_bytes < matmul_scratch_bytes(p) || (p.scratch_bytes > 0 && p.scratch == nullptr) ||
      reinterpret_cast<uintptr_t>(p.scratch) % 16 != 0) {
    return cudaErrorInvalidValue;
  }
  float* out = splits > 1 ? reinterpret_cast<float*>(static_cast<std::byte*>(p.scratch) + split_offset(p)) : p.y;
  const int64_t split_cols = splits > 1 ? matvec_split_cols(p.cols, splits) : p.cols;
  LaunchShape s = matvec_launch(p.rows, p.n_tokens, kMatvecTokens);
  s.grid.z = static_cast<uint32_t>(splits);
  if (quantized(p.type)) {
    if (reinterpret_cast<uintptr_t>(p.w) % 2 != 0) return cudaErrorInvalidValue;  // the blocks' 16-bit reads
    const ActView xq = act_view(p.scratch, p.n_tokens, p.cols);
    const int64_t n_blocks = p.n_tokens * (p.cols / 32);
    const LaunchShape q = act_quant_launch(p.n_tokens, p.cols);
    HEARTH_LAUNCH(act_quant_kernel, to_dim3(q.grid), to_dim3(q.block), 0, stream)(p.x, up, gated, n_blocks, xq);
    if (const cudaError_t e = launched(); e != cudaSuccess) return e;
    if (takes_mma(p)) {
      const LaunchShape m = quant_mma_launch(p.rows, p.n_tokens);
      if (p.type == DType::kQ8_0) {
        HEARTH_LAUNCH(quant_mma_kernel<BlockQ8_0>, to_dim3(m.grid), to_dim3(m.block), 0, stream)(
            static_cast<const BlockQ8_0*>(p.w), p.rows, p.cols, xq, p.n_tokens, p.y);
      } else {
        HEARTH_LAUNCH(quant_mma_kernel<BlockQ4_0>, to_dim3(m.grid), to_dim3(m.block), 0, stream)(
            static_cast<const BlockQ4_0*>(p.w), p.rows, p.cols, xq, p.n_tokens, p.y);
      }
      return launched();
    }
    if (p.type == DType::kQ8_0) {
      HEARTH_LAUNCH(quant_matvec_kernel<BlockQ8_0>, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
          static_cast<const BlockQ8_0*>(p.w), p.rows, p.cols, xq, p.n_tokens, split_cols, out);
    } else {
      HEARTH_LAUNCH(quant_matvec_kernel<BlockQ4_0>, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
          static_cast<const BlockQ4_0*>(p.w), p.rows, p.cols, xq, p.n_tokens, split_cols, out);
    }
  } else {
    const int64_t row_bytes = p.cols * (p.type == DType::kF32 ? 4 : 2);
    const bool vec = row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(p.w) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && p.cols % 4 == 0;
    const auto* w = static_cast<const std::byte*>(p.w);
    if (p.type == DType::kF32) {
      HEARTH_LAUNCH(float_matvec_kernel<DType::kF32>, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
          w, row_bytes, p.rows, p.cols, vec, p.x, p.n_tokens, split_cols, out);
    } else if (p.type == DType::kF16) {
      HEARTH_LAUNCH(float_matvec_kernel<DType::kF16>, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
          w, row_bytes, p.rows, p.cols, vec, p.x, p.n_tokens, split_cols, out);
    } else {
      HEARTH_LAUNCH(float_matvec_kernel<DType::kBF16>, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
          w, row_bytes, p.rows, p.cols, vec, p.x, p.n_tokens, split_cols, out);
    }
  }
  if (const cudaError_t e = launched(); e != cudaSuccess || splits == 1) return e;
  const LaunchShape e = elementwise_launch(p.n_tokens * p.rows);
  HEARTH_LAUNCH(split_sum_kernel, to_dim3(e.grid), to_dim3(e.block), 0, stream)(out, splits, p.n_tokens * p.rows,
                                                                                 p.y);
  return launched();
}

}  // namespace

cudaError_t matmul(const MatmulParams& p, cudaStream_t stream) { return product(p, nullptr, nullptr, stream); }

cudaError_t swiglu_matmul(const MatmulParams& p, float* gate, const float* up, cudaStream_t stream) {
  if (p.x != gate || up == nullptr) return cudaErrorInvalidValue;
  if (!quantized(p.type)) return cudaErrorNotSupported;  // refused before gate is touched
  if (p.n_tokens <= 0) return cudaSuccess;
  if (p.rows > 0) return product(p, up, gate, stream);
  return swiglu(gate, up, p.n_tokens * p.cols, gate, stream);  // gate holds the activation all the same
}

cudaError_t matmul_group_quant(const dev::GroupQuantView& w, const float* x, int64_t n_tokens, float* y,
                               cudaStream_t stream, MatmulPath path) {
  if (w.rows <= 0 || n_tokens <= 0) return cudaSuccess;
  if (w.bits != 4 && w.bits != 8) return cudaErrorNotSupported;
  const int32_t pack = dev::group_quant_pack(w.bits);
  if (w.cols % pack != 0 || w.rows % pack != 0 || kGroupQuantTileCols % pack != 0) return cudaErrorInvalidValue;
  if (w.g_idx == nullptr && w.group_size <= 0) return cudaErrorInvalidValue;
  if (path == MatmulPath::kTensorCores || (path == MatmulPath::kAuto && n_tokens >= kGroupQuantMmaMinTokens)) {
    const LaunchShape m = quant_mma_launch(w.rows, n_tokens);
    HEARTH_LAUNCH(group_quant_mma_kernel, to_dim3(m.grid), to_dim3(m.block), 0, stream)(w, x, n_tokens, y);
    return launched();
  }
  const LaunchShape s = group_quant_launch(w.rows, n_tokens);
  HEARTH_LAUNCH(group_quant_matvec_kernel, to_dim3(s.grid), to_dim3(s.block), s.shared_bytes, stream)(
      w, x, n_tokens, y);
  return launched();
}

}  // namespace hearth::kernels::cuda
