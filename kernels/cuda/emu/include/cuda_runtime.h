// The emulated device's runtime header: the runtime API and, for kernel sources compiled
// by the host compiler, the execution model (kernels/cuda/emu/device.h).
#pragma once

#include "cuda_runtime_api.h"
#include "kernels/cuda/emu/device.h"

// The runtime's C++ overloads for typed pointers.
template <typename T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
template <typename T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
