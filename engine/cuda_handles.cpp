#include "engine/cuda_handles.h"

#include <cuda_runtime.h>

#include "common/log.h"

namespace hearth {

std::string cuda_error_text(cudaError_t e) { return fmt::format("{} ({})", cudaGetErrorName(e), cudaGetErrorString(e)); }

Status cuda_status(cudaError_t e, std::string_view what) {
  const ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal;
  return make_error(code, "{}: {}", what, cuda_error_text(e));
}

bool cuda_error_is_sticky(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorDevicesUnavailable:
    case cudaErrorUnknown: return true;
    default: return false;
  }
}

void CudaStreamTraits::release(cudaStream_t s) noexcept {
  if (const cudaError_t e = cudaStreamDestroy(s); e != cudaSuccess) {
    HEARTH_LOG_WARN("cudaStreamDestroy: {}", cuda_error_text(e));
  }
}

void CudaEventTraits::release(cudaEvent_t ev) noexcept {
  if (const cudaError_t e = cudaEventDestroy(ev); e != cudaSuccess) {
    HEARTH_LOG_WARN("cudaEventDestroy: {}", cuda_error_text(e));
  }
}

void CublasLtTraits::release(cublasLtHandle_t h) noexcept {
  if (const cublasStatus_t s = cublasLtDestroy(h); s != CUBLAS_STATUS_SUCCESS) {
    HEARTH_LOG_WARN("cublasLtDestroy: status {}", static_cast<int>(s));
  }
}

Result<CudaStream> cuda_stream_create() {
  cudaStream_t s = nullptr;
  if (const cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e != cudaSuccess) {
    return cuda_status(e, "cannot create a CUDA stream");
  }
  return CudaStream(s);
}

Result<CudaEvent> cuda_event_create() {
  cudaEvent_t ev = nullptr;
  if (const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming); e != cudaSuccess) {
    return cuda_status(e, "cannot create a CUDA event");
  }
  return CudaEvent(ev);
}

Result<CublasLtHandle> cublaslt_create() {
  cublasLtHandle_t h = nullptr;
  if (const cublasStatus_t s = cublasLtCreate(&h); s != CUBLAS_STATUS_SUCCESS) {
    return make_error(ErrorCode::kInternal, "cannot create a cuBLASLt handle (status {})", static_cast<int>(s));
  }
  return CublasLtHandle(h);
}

Result<DeviceBuffer> DeviceBuffer::device(size_t bytes, std::string_view what) {
  DeviceBuffer b;
  b.kind_ = Kind::kDevice;
  if (bytes == 0) return b;
  if (const cudaError_t e = cudaMalloc(&b.data_, bytes); e != cudaSuccess) {
    cudaGetLastError();  // out of memory is not sticky: clear it
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    b.data_ = nullptr;
    return make_error(e == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted : ErrorCode::kInternal,
                      "CUDA out of memory allocating {} ({} MiB asked, {} MiB of {} MiB free): {}", what,
                      bytes >> 20, free >> 20, total >> 20, cuda_error_text(e));
  }
  b.bytes_ = bytes;
  return b;
}

Result<DeviceBuffer> DeviceBuffer::pinned_host(size_t bytes, std::string_view what) {
  DeviceBuffer b;
  b.kind_ = Kind::kPinnedHost;
  if (bytes == 0) return b;
  if (const cudaError_t e = cudaMallocHost(&b.data_, bytes); e != cudaSuccess) {
    cudaGetLastError();
    b.data_ = nullptr;
    return make_error(ErrorCode::kResourceExhausted, "cannot pin {} MiB of host memory for {}: {}", bytes >> 20, what,
                      cuda_error_text(e));
  }
  b.bytes_ = bytes;
  return b;
}

void DeviceBuffer::reset() noexcept {
  if (data_ != nullptr) {
    const cudaError_t e = kind_ == Kind::kDevice ? cudaFree(data_) : cudaFreeHost(data_);
    if (e != cudaSuccess) HEARTH_LOG_WARN("freeing {} bytes of CUDA memory: {}", bytes_, cuda_error_text(e));
  }
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace hearth
