// The CUDA execution model on the CPU, for kernel sources compiled by the host compiler
// in an emulated build (HEARTH_CUDA=EMU): the qualifiers, the built-in indices, barriers,
// warp collectives, atomics and the launch. Each block's threads run as cooperative
// fibers (kernels/cuda/emu/executor.cpp) that switch only at __syncthreads and at warp
// collectives, in an order shuffled from HEARTH_EMU_SEED, so a missing barrier gives a
// wrong answer rather than passing by luck; a barrier or collective that not every thread
// it names reaches is reported as the hang it would be on a GPU.
//
// Kernel sources use two macros of kernels/cuda/reduce.cuh in place of CUDA's own syntax:
// HEARTH_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...) for
// kernel<<<grid, block, shared_bytes, stream>>>(args...), and HEARTH_DYNAMIC_SHARED(T,
// name) for `extern __shared__ T name[]`, which C++ cannot give a per-launch size.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __restrict__ __restrict
#define __launch_bounds__(...)
// One instance per block: a block's fibers all run on one host thread, one block at a time.
#define __shared__ static thread_local

namespace hearth::emu {

// The seed of every block's thread order: HEARTH_EMU_SEED, else a random one per process
// (tests print it, so that a failure's order can be had again).
uint64_t seed();

namespace detail {
extern thread_local const uint3* t_thread_idx;
extern thread_local uint3 t_block_idx;
extern thread_local dim3 t_block_dim;
extern thread_local dim3 t_grid_dim;
extern thread_local void* t_dynamic_shared;
}  // namespace detail

// Where a block's threads meet; each is a switch to the block's scheduler.
void sync_threads();
void sync_warp(unsigned mask);

enum class Shuffle : int { kIndex, kUp, kDown, kXor };
// The warp exchange under every __shfl_*_sync: this lane's value in, the value of the lane
// `kind` and `param` name out (this lane's own where CUDA defines it so).
uint64_t warp_shuffle(unsigned mask, uint64_t bits, Shuffle kind, int param, int width);

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32: d = a * b + c over the warp's
// fragments (laid out across the lanes as the PTX ISA gives them); every lane of a full
// warp must reach it.
void mma_m16n8k32_s8(int32_t d[4], const uint32_t a[4], const uint32_t b[2], const int32_t c[4]);
// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32: the same for f16 A and B (two values
// a register, lowest first) onto f32 C.
void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);

// The kernel body of one launch, run by every thread of every block.
using KernelBody = std::function<void()>;
// Checks the geometry as the driver would (returning its error, not sticky) and enqueues
// the grid on `stream`.
cudaError_t launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   KernelBody body);

template <typename... P>
class Launcher {
 public:
  Launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream)
      : kernel_(kernel), name_(name), grid_(grid), block_(block), shared_(shared_bytes), stream_(stream) {}

  // The arguments are converted to the kernel's parameter types and copied now, as a
  // launch copies them.
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "a kernel launch takes one argument per parameter");
    auto params = std::tuple<std::decay_t<P>...>(std::forward<A>(args)...);
    auto* kernel = kernel_;
    launch(name_, grid_, block_, shared_, stream_, [kernel, params] { std::apply(kernel, params); });
  }

 private:
  void (*kernel_)(P...);
  const char* name_;
  dim3 grid_, block_;
  size_t shared_;
  cudaStream_t stream_;
};

template <typename... P>
Launcher<P...> launcher(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t shared_bytes,
                        cudaStream_t stream) {
  return Launcher<P...>(kernel, name, grid, block, shared_bytes, stream);
}

template <typename T>
T shuffle(unsigned mask, T v, Shuffle kind, int param, int width) {
  static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable_v<T>, "a shuffle moves up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  bits = warp_shuffle(mask, bits, kind, param, width);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

template <typename T>
T atomic_add(T* address, T v) {
  if constexpr (std::is_integral_v<T>) {
    return __atomic_fetch_add(address, v, __ATOMIC_RELAXED);
  } else {
    T old;
    __atomic_load(address, &old, __ATOMIC_RELAXED);
    T desired = old + v;
    while (!__atomic_compare_exchange(address, &old, &desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      desired = old + v;
    }
    return old;
  }
}

}  // namespace hearth::emu

#define threadIdx (*::hearth::emu::detail::t_thread_idx)
#define blockIdx (::hearth::emu::detail::t_block_idx)
#define blockDim (::hearth::emu::detail::t_block_dim)
#define gridDim (::hearth::emu::detail::t_grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { ::hearth::emu::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::hearth::emu::sync_warp(mask); }

template <typename T>
T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  return ::hearth::emu::shuffle(mask, v, ::hearth::emu::Shuffle::kIndex, src_lane, width);
}
template <typename T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::hearth::emu::shuffle(mask, v, ::hearth::emu::Shuffle::kUp, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return ::hearth::emu::shuffle(mask, v, ::hearth::emu::Shuffle::kDown, static_cast<int>(delta), width);
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  return ::hearth::emu::shuffle(mask, v, ::hearth::emu::Shuffle::kXor, lane_mask, width);
}

template <typename T>
T atomicAdd(T* address, T v) {
  return ::hearth::emu::atomic_add(address, v);
}
template <typename T>
T atomicCAS(T* address, T compare, T v) {
  __atomic_compare_exchange_n(address, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
template <typename T>
T atomicExch(T* address, T v) {
  return __atomic_exchange_n(address, v, __ATOMIC_RELAXED);
}
template <typename T>
T atomicMax(T* address, T v) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (old < v && !__atomic_compare_exchange_n(address, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T>
T atomicMin(T* address, T v) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (old > v && !__atomic_compare_exchange_n(address, &old, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
  return old;
}

// CUDA's overloads of min and max for device code.
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline float min(float a, float b) { return fminf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
using std::isinf;
using std::isnan;
