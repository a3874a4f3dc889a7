// Warp and block reductions and launch helpers the kernels share. CUDA sources only.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

// Where a kernel source cannot be plain C++: a launch, dynamic shared memory, and an
// unroll hint. Under nvcc they are CUDA's own syntax; in an emulated build
// (kernels/cuda/emu/device.h) a launch enqueues the grid on the emulated stream, dynamic
// shared memory is an allocation of the launch's own, checked at its end, and the hint is
// GCC's.
//   HEARTH_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...)
//   HEARTH_DYNAMIC_SHARED(float, name);  // extern __shared__ float name[];
//   HEARTH_UNROLL(4) for (...)           // #pragma unroll 4
#define HEARTH_PRAGMA(x) _Pragma(#x)
#if defined(__CUDACC__)
#define HEARTH_UNROLL(n) HEARTH_PRAGMA(unroll n)
#else
#define HEARTH_UNROLL(n) HEARTH_PRAGMA(GCC unroll n)
#endif
#if defined(__CUDACC__)
#define HEARTH_LAUNCH(kernel, grid, block, shared_bytes, stream) kernel<<<grid, block, shared_bytes, stream>>>
#define HEARTH_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#else
#define HEARTH_LAUNCH(kernel, grid, block, shared_bytes, stream) \
  ::hearth::emu::launcher(kernel, #kernel, grid, block, shared_bytes, stream)
#define HEARTH_DYNAMIC_SHARED(type, name) \
  type* const name = static_cast<type*>(::hearth::emu::detail::t_dynamic_shared)
#endif

namespace hearth::kernels::cuda {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); `scratch` holds 32
// floats of shared memory. Every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

inline dim3 to_dim3(const Dim3& d) { return dim3(d.x, d.y, d.z); }

// A launch's error, or cudaSuccess.
inline cudaError_t launched() { return cudaGetLastError(); }

}  // namespace hearth::kernels::cuda
