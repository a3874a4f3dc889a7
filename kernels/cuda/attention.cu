// Attention of a step over the paged KV cache, prefill and decode alike: one block per
// (query token, head, key range). The block walks its keys a tile of kAttentionBlock at a
// time: each thread scores one key of the tile, the tile's softmax state is merged into
// the running one (dev::softmax_merge), and the threads that own output dimensions
// accumulate the tile's weighted values. With one range a block writes its output; split
// (flash-decoding, where a step has too few (token, head) pairs to fill the device) each
// range writes its unnormalised output and softmax state, and a merge kernel combines
// the ranges in order. No tensor cores yet.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/device_math.h"

namespace hearth::kernels::cuda {
namespace {

// Output dimensions a thread owns: d = threadIdx.x + i * kAttentionBlock.
constexpr int kDimsPerThread = (kAttentionMaxHeadDim + kAttentionBlock - 1) / kAttentionBlock;

// Where a range's partial result starts in the split scratch, in floats: its softmax
// state (max, sum), then head_dim floats of output scaled by exp(-max), not divided by
// the sum.
__device__ int64_t split_record(const AttentionStep& p, int32_t t, int32_t h, int32_t split, int32_t splits) {
  return ((static_cast<int64_t>(t) * p.n_heads + h) * splits + split) * (p.head_dim + 2);
}

__global__ void attention_kernel(AttentionStep p, int32_t splits, float* scratch) {
  HEARTH_DYNAMIC_SHARED(float, shared);
  float* q = shared;                        // [head_dim]
  float* scores = q + p.head_dim;           // [kAttentionBlock]
  float* scratch32 = scores + kAttentionBlock;  // [32]
  const int tid = threadIdx.x;
  const auto split = static_cast<int32_t>(blockIdx.z);
  for (int32_t t = blockIdx.x; t < p.n_tokens; t += gridDim.x) {
    const int32_t s = dev::step_sequence_of(p.query_start, p.n_seqs, t);
    const int32_t* table = p.pages + p.page_start[s];
    const int32_t pos = p.positions[t];
    int32_t begin, end;
    attention_split_range(attention_first_key(pos, p.sliding_window), pos, splits, split,
                          static_cast<int32_t>(kAttentionBlock), begin, end);
    for (int32_t h = blockIdx.y; h < p.n_heads; h += gridDim.y) {
      const int32_t kvh = h / (p.n_heads / p.n_kv_heads);
      const float* qrow = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      __syncthreads();  // the previous head's reads of q are done
      for (int d = tid; d < p.head_dim; d += blockDim.x) q[d] = qrow[d];
      __syncthreads();
      float acc[kDimsPerThread];
      for (float& a : acc) a = 0.0f;
      dev::SoftmaxState state;
      for (int32_t k0 = begin; k0 < end; k0 += kAttentionBlock) {
        const int32_t k = k0 + tid;
        float score = -INFINITY;
        if (k < end) {
          const int64_t block = dev::kv_position_block(table, k, p.block_size);
          const int32_t offset = k % p.block_size;
          float dot = 0.0f;
          for (int32_t d = 0; d < p.head_dim; ++d) {
            dot += q[d] * dev::kv_element_load(p.k_cache, p.kv_dtype,
                                               kv_key_index(block, kvh, d, offset, p.n_kv_heads, p.head_dim,
                                                            p.block_size));
          }
          score = dev::softcap(dot * p.scale, p.softcap);
        }
        dev::SoftmaxState tile;
        tile.max = block_max(score, scratch32);
        const float e = k < end ? expf(score - tile.max) : 0.0f;
        tile.sum = block_sum(e, scratch32);
        scores[tid] = e;
        __syncthreads();
        float scale_run, scale_tile;
        dev::softmax_merge(state, tile, scale_run, scale_tile);
        const int32_t n_keys = min(static_cast<int32_t>(kAttentionBlock), end - k0);
        for (int i = 0; i < kDimsPerThread; ++i) {
          const int d = tid + i * kAttentionBlock;
          if (d >= p.head_dim) break;
          float part = 0.0f;
          for (int32_t j = 0; j < n_keys; ++j) {
            const int32_t kk = k0 + j;
            const int64_t value = kv_value_index(dev::kv_position_block(table, kk, p.block_size), kvh,
                                                 kk % p.block_size, p.n_kv_heads, p.head_dim, p.block_size);
            part += scores[j] * dev::kv_element_load(p.v_cache, p.kv_dtype, value + d);
          }
          acc[i] = acc[i] * scale_run + part * scale_tile;
        }
        __syncthreads();  // scores are rewritten by the next tile
      }
      if (splits == 1) {
        float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
        for (int i = 0; i < kDimsPerThread; ++i) {
          const int d = tid + i * kAttentionBlock;
          if (d < p.head_dim) out[d] = acc[i] / state.sum;
        }
      } else {
        float* rec = scratch + split_record(p, t, h, split, splits);
        if (tid == 0) {
          rec[0] = state.max;
          rec[1] = state.sum;
        }
        for (int i = 0; i < kDimsPerThread; ++i) {
          const int d = tid + i * kAttentionBlock;
          if (d < p.head_dim) rec[2 + d] = acc[i];
        }
      }
    }
  }
}

// The ranges of each (token, head) merged in order, as the tiles of a range are: a thread
// per output dimension. An empty range (max -inf) adds nothing.
__global__ void attention_merge_kernel(AttentionStep p, int32_t splits, const float* scratch) {
  const int d = threadIdx.x;
  for (int32_t t = blockIdx.x; t < p.n_tokens; t += gridDim.x) {
    for (int32_t h = blockIdx.y; h < p.n_heads; h += gridDim.y) {
      if (d >= p.head_dim) continue;
      dev::SoftmaxState state;
      float acc = 0.0f;
      for (int32_t z = 0; z < splits; ++z) {
        const float* rec = scratch + split_record(p, t, h, z, splits);
        dev::SoftmaxState range;
        range.max = rec[0];
        range.sum = rec[1];
        float scale_run, scale_range;
        dev::softmax_merge(state, range, scale_run, scale_range);
        acc = acc * scale_run + rec[2 + d] * scale_range;
      }
      p.out[(static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim + d] = acc / state.sum;
    }
  }
}

}  // namespace

cudaError_t attention(const AttentionStep& p, const AttentionSplit& split, cudaStream_t stream) {
  if (kv_dtype_bytes(p.kv_dtype) == 0) return cudaErrorNotSupported;
  if (p.head_dim <= 0 || p.head_dim > kAttentionMaxHeadDim) return cudaErrorNotSupported;
  if (p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (split.splits < 1 || split.splits > static_cast<int32_t>(kAttentionMaxSplits)) return cudaErrorInvalidValue;
  if (split.splits > 1 && (split.scratch == nullptr ||
                           split.scratch_bytes < attention_scratch_bytes(p.n_tokens, p.n_heads, p.head_dim,
                                                                         split.splits))) {
    return cudaErrorInvalidValue;
  }
  if (p.n_tokens <= 0) return cudaSuccess;
  const LaunchShape s = attention_launch(p.n_tokens, p.n_heads, p.head_dim, split.splits);
  HEARTH_LAUNCH(attention_kernel, to_dim3(s.grid), to_dim3(s.block), s.shared_bytes, stream)(p, split.splits,
                                                                                             split.scratch);
  if (split.splits == 1) return launched();
  if (const cudaError_t e = launched(); e != cudaSuccess) return e;
  const LaunchShape m = attention_merge_launch(p.n_tokens, p.n_heads, p.head_dim);
  HEARTH_LAUNCH(attention_merge_kernel, to_dim3(m.grid), to_dim3(m.block), 0, stream)(p, split.splits, split.scratch);
  return launched();
}

cudaError_t attention(const AttentionStep& p, cudaStream_t stream) { return attention(p, AttentionSplit{}, stream); }

}  // namespace hearth::kernels::cuda
