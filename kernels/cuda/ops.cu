// Elementwise and per-row kernels: embedding, norms, RoPE, SwiGLU, GELU, adds, row gathers,
// the KV store. Every value is a device_math.h function of its inputs.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/device_math.h"

namespace hearth::kernels::cuda {
namespace {

__global__ void embedding_kernel(DType type, const std::byte* table, int64_t row_bytes, int64_t dim,
                                 const int32_t* ids, int64_t n, float* out) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const std::byte* row = table + static_cast<int64_t>(ids[t]) * row_bytes;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float v;
      if (type == DType::kQ8_0) {
        v = dev::q8_0_value(reinterpret_cast<const BlockQ8_0*>(row)[c / 32], static_cast<int>(c % 32));
      } else if (type == DType::kQ4_0) {
        v = dev::q4_0_value(reinterpret_cast<const BlockQ4_0*>(row)[c / 32], static_cast<int>(c % 32));
      } else {
        v = dev::float_row_value(type, row, c);
      }
      out[t * dim + c] = v;
    }
  }
}

// One block per row: the sum of squares reduced over the block, then the scaled row.
// With `delta`, x += delta first (written back), the fused residual add.
__global__ void rms_norm_kernel(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                                float* out) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    float* xr = x + t * dim;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      float v = xr[i];
      if (delta != nullptr) {
        v += delta[t * dim + i];
        xr[i] = v;
      }
      ss += v * v;
    }
    const float scale = dev::rms_inv(block_sum(ss, scratch), dim, eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = weight[i] * (scale * xr[i]);
  }
}

// One block per row: the mean, then the sum of squared deviations, each reduced over
// the block; then the normalised row.
__global__ void layer_norm_kernel(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim,
                                  float eps, float* out) {
  __shared__ float scratch[32];
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* xr = x + t * dim;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) sum += xr[i];
    const float mean = block_sum(sum, scratch) / static_cast<float>(dim);
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) ss += (xr[i] - mean) * (xr[i] - mean);
    const float inv = dev::layer_norm_inv(block_sum(ss, scratch), dim, eps);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      out[t * dim + i] = dev::layer_norm_value(xr[i], mean, inv, weight, bias, i);
    }
  }
}

__global__ void rope_kernel(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                            const int32_t* positions, const float* inv_freq, bool interleaved) {
  const int64_t half = rotary_dim / 2;
  const int64_t total = n * n_heads * half;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t pair = i % half;
    const int64_t head = i / half;  // t * n_heads + h
    const int64_t t = head / n_heads;
    int32_t a, b;
    dev::rope_pair(static_cast<int32_t>(pair), static_cast<int32_t>(rotary_dim), interleaved, a, b);
    float* v = x + head * head_dim;
    dev::rope_rotate(v[a], v[b], positions[t], inv_freq[pair]);
  }
}

__global__ void swiglu_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = dev::silu_mul(gate[i], up[i]);
  }
}

__global__ void gelu_kernel(const float* x, const float* up, int64_t n, bool tanh_form, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = dev::gelu(x[i], tanh_form);
    out[i] = up != nullptr ? g * up[i] : g;
  }
}

__global__ void moe_route_kernel(const float* logits, int64_t n, MoeRouting r, int32_t* ids, float* weights) {
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < n;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dev::moe_top_k(logits + t * r.n_experts, r, ids + t * r.k, weights + t * r.k);
  }
}

__global__ void moe_combine_kernel(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k,
                                   int64_t dim, float* out) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
      out[t * dim + i] = dev::moe_combine_value(rows, pos + t * k, weights + t * k, k, dim, i);
    }
  }
}

__global__ void sigmoid_gate_rows_kernel(float* x, const float* gate, int64_t n, int64_t dim) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float g = dev::sigmoid(gate[t]);
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) x[t * dim + i] *= g;
  }
}

// A warp per (rank row j, token t): the shrunk value A[j] . x[t] of an adapted row.
__global__ void lora_shrink_kernel(LoraProduct p) {
  const int lane = threadIdx.x % 32;
  const int64_t j = blockIdx.x * static_cast<int64_t>(kMatvecWarps) + threadIdx.x / 32;
  if (j >= p.max_rank) return;
  for (int64_t t = blockIdx.y; t < p.n; t += gridDim.y) {
    const int32_t s = p.row_slot[t];
    if (s < 0 || s >= p.n_slots) continue;
    const LoraFactors f = p.factors[s];
    if (f.a == nullptr || j >= f.rank) continue;
    const float* a = f.a + j * p.in;
    const float* x = p.x + t * p.in;
    float sum = 0.0f;
    for (int64_t c = lane; c < p.in; c += 32) sum += a[c] * x[c];
    sum = warp_sum(sum);
    if (lane == 0) p.scratch[t * p.max_rank + j] = sum;
  }
}

// A block per token, a thread per output: y += scale * B (A x).
__global__ void lora_expand_kernel(LoraProduct p) {
  for (int64_t t = blockIdx.x; t < p.n; t += gridDim.x) {
    const int32_t s = p.row_slot[t];
    if (s < 0 || s >= p.n_slots) continue;
    const LoraFactors f = p.factors[s];
    if (f.a == nullptr) continue;
    const float* shrunk = p.scratch + t * p.max_rank;
    for (int64_t o = threadIdx.x; o < p.out; o += blockDim.x) {
      p.y[t * p.out + o] += dev::lora_expand_value(f.bt + o, p.out, shrunk, f.rank, f.scale);
    }
  }
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] *= s;
  }
}

__global__ void softcap_kernel(float* x, int64_t n, float cap) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = dev::softcap(x[i], cap);
  }
}

// y[i] += x[i % period] (period n for add, dim for add_bias).
__global__ void add_kernel(float* y, const float* x, int64_t n, int64_t period) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i % period];
  }
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* src = x + static_cast<int64_t>(rows[t]) * dim;
    for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) out[t * dim + i] = src[i];
  }
}

__global__ void permute_columns_kernel(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) {
  for (int64_t t = blockIdx.x; t < n; t += gridDim.x) {
    const float* src = x + t * cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[t * cols + j] = src[perm[j]];
  }
}

__global__ void kv_store_kernel(KvStoreParams p) {
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  const int64_t total = p.n_tokens * kv_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / kv_dim;
    const auto h = static_cast<int32_t>((i % kv_dim) / p.head_dim);
    const auto d = static_cast<int32_t>(i % p.head_dim);
    const int64_t block = dev::kv_slot_block(p.slots[t], p.block_size);
    const int32_t offset = dev::kv_slot_offset(p.slots[t], p.block_size);
    dev::kv_element_store(p.k_cache, p.kv_dtype,
                          kv_key_index(block, h, d, offset, p.n_kv_heads, p.head_dim, p.block_size), p.k[i]);
    dev::kv_element_store(p.v_cache, p.kv_dtype,
                          kv_value_index(block, h, offset, p.n_kv_heads, p.head_dim, p.block_size) + d, p.v[i]);
  }
}

__global__ void rope_kv_store_kernel(float* q, float* k, int64_t n_heads, int64_t rotary_dim,
                                     const int32_t* positions, const float* inv_freq, bool interleaved,
                                     KvStoreParams p) {
  const int64_t half = rotary_dim / 2, head_dim = p.head_dim;
  const int64_t k_per_head = half + (head_dim - rotary_dim);  // its rotated pairs, then the dimensions past them
  const int64_t q_part = p.n_tokens * n_heads * half;
  const int64_t k_part = p.n_tokens * p.n_kv_heads * k_per_head;
  const int64_t total = q_part + k_part + p.n_tokens * p.n_kv_heads * head_dim;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < q_part) {
      const int64_t pair = i % half, head = i / half;  // head: t * n_heads + h
      int32_t a, b;
      dev::rope_pair(static_cast<int32_t>(pair), static_cast<int32_t>(rotary_dim), interleaved, a, b);
      float* x = q + head * head_dim;
      dev::rope_rotate(x[a], x[b], positions[head / n_heads], inv_freq[pair]);
      continue;
    }
    const bool is_k = i < q_part + k_part;
    const int64_t j = is_k ? i - q_part : i - q_part - k_part;
    const int64_t per_head = is_k ? k_per_head : head_dim;
    const int64_t head = j / per_head, e = j % per_head;  // head: t * n_kv_heads + h
    const int64_t t = head / p.n_kv_heads;
    const auto h = static_cast<int32_t>(head % p.n_kv_heads);
    const int64_t block = dev::kv_slot_block(p.slots[t], p.block_size);
    const int32_t offset = dev::kv_slot_offset(p.slots[t], p.block_size);
    if (!is_k) {
      const auto d = static_cast<int32_t>(e);
      dev::kv_element_store(p.v_cache, p.kv_dtype,
                            kv_value_index(block, h, offset, p.n_kv_heads, p.head_dim, p.block_size) + d,
                            p.v[head * head_dim + d]);
      continue;
    }
    float* x = k + head * head_dim;
    int32_t a, b = -1;
    if (e < half) {
      dev::rope_pair(static_cast<int32_t>(e), static_cast<int32_t>(rotary_dim), interleaved, a, b);
      dev::rope_rotate(x[a], x[b], positions[t], inv_freq[e]);
    } else {
      a = static_cast<int32_t>(rotary_dim + (e - half));
    }
    dev::kv_element_store(p.k_cache, p.kv_dtype,
                          kv_key_index(block, h, a, offset, p.n_kv_heads, p.head_dim, p.block_size), x[a]);
    if (b >= 0) {
      dev::kv_element_store(p.k_cache, p.kv_dtype,
                            kv_key_index(block, h, b, offset, p.n_kv_heads, p.head_dim, p.block_size), x[b]);
    }
  }
}

__global__ void convert_kernel(const float* x, int64_t n, bool bf16, uint16_t* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    out[i] = bf16 ? f32_to_bf16(x[i]) : f32_to_fp16(x[i]);
  }
}

bool is_row_readable(DType type) {
  switch (type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
    case DType::kQ4_0: return true;
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
    case DType::kF16R16:
    case DType::kBF16R16: return false;
  }
  return false;
}

}  // namespace

cudaError_t embedding(DType type, const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out,
                      cudaStream_t stream) {
  if (!is_row_readable(type)) return cudaErrorNotSupported;
  if (n <= 0) return cudaSuccess;
  const int64_t elems = dtype_block_elems(type);
  if (dim % elems != 0) return cudaErrorInvalidValue;
  const int64_t row_bytes = dim / elems * dtype_block_bytes(type);
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(embedding_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
      type, static_cast<const std::byte*>(table), row_bytes, dim, ids, n, out);
  return launched();
}

cudaError_t rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  // x is only read when there is no delta.
  HEARTH_LAUNCH(rms_norm_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
      const_cast<float*>(x), nullptr, weight, n, dim, eps, out);
  return launched();
}

cudaError_t add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                         float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(rms_norm_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, delta, weight, n, dim, eps, out);
  return launched();
}

cudaError_t layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                       float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(layer_norm_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, weight, bias, n, dim, eps, out);
  return launched();
}

cudaError_t rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                 const int32_t* positions, const float* inv_freq, bool interleaved, cudaStream_t stream) {
  if (rotary_dim % 2 != 0 || rotary_dim < 2 || rotary_dim > head_dim) return cudaErrorNotSupported;
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n * n_heads * (rotary_dim / 2));
  HEARTH_LAUNCH(rope_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
      x, n, n_heads, head_dim, rotary_dim, positions, inv_freq, interleaved);
  return launched();
}

cudaError_t swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n);
  HEARTH_LAUNCH(swiglu_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(gate, up, n, out);
  return launched();
}

cudaError_t gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n);
  HEARTH_LAUNCH(gelu_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, up, n, tanh_form, out);
  return launched();
}

cudaError_t moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights,
                      cudaStream_t stream) {
  if (r.k < 1 || r.k > r.n_experts) return cudaErrorInvalidValue;
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n);
  HEARTH_LAUNCH(moe_route_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(logits, n, r, ids, weights);
  return launched();
}

cudaError_t moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                        float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(moe_combine_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(rows, pos, weights, n, k, dim, out);
  return launched();
}

cudaError_t sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(sigmoid_gate_rows_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, gate, n, dim);
  return launched();
}

cudaError_t lora(const LoraProduct& p, cudaStream_t stream) {
  if (p.n <= 0 || p.max_rank <= 0) return cudaSuccess;
  const LaunchShape shrink = matvec_launch(p.max_rank, p.n);
  HEARTH_LAUNCH(lora_shrink_kernel, to_dim3(shrink.grid), to_dim3(shrink.block), 0, stream)(p);
  if (const cudaError_t e = launched(); e != cudaSuccess) return e;
  const LaunchShape expand = rows_launch(p.n);
  HEARTH_LAUNCH(lora_expand_kernel, to_dim3(expand.grid), to_dim3(expand.block), 0, stream)(p);
  return launched();
}

cudaError_t scale(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape sh = elementwise_launch(n);
  HEARTH_LAUNCH(scale_kernel, to_dim3(sh.grid), to_dim3(sh.block), 0, stream)(x, n, s);
  return launched();
}

cudaError_t softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape sh = elementwise_launch(n);
  HEARTH_LAUNCH(softcap_kernel, to_dim3(sh.grid), to_dim3(sh.block), 0, stream)(x, n, cap);
  return launched();
}

cudaError_t add(float* y, const float* x, int64_t n, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n);
  HEARTH_LAUNCH(add_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(y, x, n, n);
  return launched();
}

cudaError_t add_bias(float* x, const float* bias, int64_t n, int64_t dim, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n * dim);
  HEARTH_LAUNCH(add_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, bias, n * dim, dim);
  return launched();
}

cudaError_t gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(gather_rows_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, rows, n, dim, out);
  return launched();
}

cudaError_t permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out,
                            cudaStream_t stream) {
  if (n <= 0 || cols <= 0) return cudaSuccess;
  const LaunchShape s = rows_launch(n);
  HEARTH_LAUNCH(permute_columns_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(x, n, cols, perm, out);
  return launched();
}

cudaError_t kv_store(const KvStoreParams& p, cudaStream_t stream) {
  if (kv_dtype_bytes(p.kv_dtype) == 0) return cudaErrorNotSupported;
  if (p.n_tokens <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(p.n_tokens * p.n_kv_heads * p.head_dim);
  HEARTH_LAUNCH(kv_store_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(p);
  return launched();
}

cudaError_t rope_kv_store(float* q, float* k, int64_t n_heads, int64_t rotary_dim, const int32_t* positions,
                          const float* inv_freq, bool interleaved, const KvStoreParams& p, cudaStream_t stream) {
  if (rotary_dim % 2 != 0 || rotary_dim < 2 || rotary_dim > p.head_dim) return cudaErrorNotSupported;
  if (kv_dtype_bytes(p.kv_dtype) == 0) return cudaErrorNotSupported;
  if (p.k != k) return cudaErrorInvalidValue;
  if (p.n_tokens <= 0) return cudaSuccess;
  const int64_t per_token = n_heads * (rotary_dim / 2) + p.n_kv_heads * (rotary_dim / 2 + p.head_dim - rotary_dim) +
                            static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  const LaunchShape s = elementwise_launch(p.n_tokens * per_token);
  HEARTH_LAUNCH(rope_kv_store_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
      q, k, n_heads, rotary_dim, positions, inv_freq, interleaved, p);
  return launched();
}

cudaError_t convert_activations(const float* x, int64_t n, DType type, void* out, cudaStream_t stream) {
  if (type != DType::kF16 && type != DType::kBF16) return cudaErrorNotSupported;
  if (n <= 0) return cudaSuccess;
  const LaunchShape s = elementwise_launch(n);
  HEARTH_LAUNCH(convert_kernel, to_dim3(s.grid), to_dim3(s.block), 0, stream)(
      x, n, type == DType::kBF16, static_cast<uint16_t*>(out));
  return launched();
}

}  // namespace hearth::kernels::cuda
