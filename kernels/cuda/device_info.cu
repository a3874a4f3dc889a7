#include "kernels/cuda/device_info.h"

#include <cuda_runtime.h>

namespace hearth::kernels::cuda {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

int compute_capability(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return prop.major * 10 + prop.minor;
}

}  // namespace hearth::kernels::cuda
