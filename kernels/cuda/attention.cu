// Attention of a step over the paged KV cache, prefill and decode alike: one block per
// (query token, head). The block walks the token's keys a tile of kAttentionBlock at a
// time: each thread scores one key of the tile, the tile's softmax state is merged into
// the running one (dev::softmax_merge), and the threads that own output dimensions
// accumulate the tile's weighted values. Correct, not tuned (no split-K, no tensor cores).
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/device_math.h"

namespace hearth::kernels::cuda {
namespace {

// Output dimensions a thread owns: d = threadIdx.x + i * kAttentionBlock.
constexpr int kDimsPerThread = (kAttentionMaxHeadDim + kAttentionBlock - 1) / kAttentionBlock;

__global__ void attention_kernel(AttentionStep p) {
  HEARTH_DYNAMIC_SHARED(float, shared);
  float* q = shared;                        // [head_dim]
  float* scores = q + p.head_dim;           // [kAttentionBlock]
  float* scratch = scores + kAttentionBlock;  // [32]
  const int tid = threadIdx.x;
  for (int32_t t = blockIdx.x; t < p.n_tokens; t += gridDim.x) {
    const int32_t s = dev::step_sequence_of(p.query_start, p.n_seqs, t);
    const int32_t* table = p.pages + p.page_start[s];
    const int32_t pos = p.positions[t];
    const int32_t first = attention_first_key(pos, p.sliding_window);
    for (int32_t h = blockIdx.y; h < p.n_heads; h += gridDim.y) {
      const int32_t kvh = h / (p.n_heads / p.n_kv_heads);
      const float* qrow = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      __syncthreads();  // the previous head's reads of q are done
      for (int d = tid; d < p.head_dim; d += blockDim.x) q[d] = qrow[d];
      __syncthreads();
      float acc[kDimsPerThread];
      for (float& a : acc) a = 0.0f;
      dev::SoftmaxState state;
      for (int32_t k0 = first; k0 <= pos; k0 += kAttentionBlock) {
        const int32_t k = k0 + tid;
        float score = -INFINITY;
        if (k <= pos) {
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
        tile.max = block_max(score, scratch);
        const float e = k <= pos ? expf(score - tile.max) : 0.0f;
        tile.sum = block_sum(e, scratch);
        scores[tid] = e;
        __syncthreads();
        float scale_run, scale_tile;
        dev::softmax_merge(state, tile, scale_run, scale_tile);
        const int32_t n_keys = min(static_cast<int32_t>(kAttentionBlock), pos - k0 + 1);
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
      float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      for (int i = 0; i < kDimsPerThread; ++i) {
        const int d = tid + i * kAttentionBlock;
        if (d < p.head_dim) out[d] = acc[i] / state.sum;
      }
    }
  }
}

}  // namespace

cudaError_t attention(const AttentionStep& p, cudaStream_t stream) {
  if (kv_dtype_bytes(p.kv_dtype) == 0) return cudaErrorNotSupported;
  if (p.head_dim <= 0 || p.head_dim > kAttentionMaxHeadDim) return cudaErrorNotSupported;
  if (p.n_kv_heads <= 0 || p.n_heads % p.n_kv_heads != 0) return cudaErrorInvalidValue;
  if (p.n_tokens <= 0) return cudaSuccess;
  const LaunchShape s = attention_launch(p.n_tokens, p.n_heads, p.head_dim);
  HEARTH_LAUNCH(attention_kernel, to_dim3(s.grid), to_dim3(s.block), s.shared_bytes, stream)(p);
  return launched();
}

}  // namespace hearth::kernels::cuda
