// What a function compiled for both the host and a CUDA device needs: HEARTH_HD marks
// it `__host__ __device__` under nvcc and plain `inline` elsewhere, so the arithmetic a
// kernel does per element (dequantization, RoPE, softmax merges, KV addressing,
// sampling's draw) lives in one header that the CPU tests run and the kernels call.
// Header-only, no dependencies beyond the standard library; C++17 (nvcc's dialect).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define HEARTH_HD __host__ __device__ __forceinline__
#else
#define HEARTH_HD inline
#endif

namespace hearth {

// The bits of a float and back (std::bit_cast is C++20, which nvcc is not built with here).
HEARTH_HD uint32_t hd_float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

HEARTH_HD float hd_bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

}  // namespace hearth
