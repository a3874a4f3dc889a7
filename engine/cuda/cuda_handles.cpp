#include "engine/cuda/cuda_handles.h"

#include <dlfcn.h>

#include <string>
#include <vector>

#include <cuda_runtime.h>

#include "common/check.h"
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

namespace {

struct CublasLtLibrary {
  CublasLtApi api{};
  Status status;
};

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, name));
  return out != nullptr;
}

#if HEARTH_CUDA_EMU
// The emulated device's cuBLASLt is linked in (kernels/cuda/emu/cublaslt.cpp).
CublasLtLibrary load_cublaslt() {
  CublasLtLibrary l;
  l.api = {&::cublasLtCreate,
           &::cublasLtDestroy,
           &::cublasLtMatmul,
           &::cublasLtMatmulAlgoGetHeuristic,
           &::cublasLtMatmulDescCreate,
           &::cublasLtMatmulDescDestroy,
           &::cublasLtMatmulDescSetAttribute,
           &::cublasLtMatmulPreferenceCreate,
           &::cublasLtMatmulPreferenceDestroy,
           &::cublasLtMatmulPreferenceSetAttribute,
           &::cublasLtMatrixLayoutCreate,
           &::cublasLtMatrixLayoutDestroy};
  return l;
}
#else
CublasLtLibrary load_cublaslt() {
  CublasLtLibrary l;
  const std::string major = std::to_string(CUBLAS_VER_MAJOR);
  const std::vector<std::string> names = {"libcublasLt.so." + major,
                                          std::string(HEARTH_CUDA_LIBRARY_DIR) + "/libcublasLt.so." + major,
                                          std::string(HEARTH_CUDA_LIBRARY_DIR) + "/libcublasLt.so"};
  void* lib = nullptr;
  for (const std::string& n : names) {
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) break;
  }
  if (lib == nullptr) {
    l.status = make_error(ErrorCode::kUnavailable,
                          "cannot load cuBLASLt (looked for {} and in {}): install the CUDA {} libraries or put them on "
                          "LD_LIBRARY_PATH",
                          names[0], HEARTH_CUDA_LIBRARY_DIR, major);
    return l;
  }
  CublasLtApi& a = l.api;
  const bool ok = resolve(lib, "cublasLtCreate", a.create) && resolve(lib, "cublasLtDestroy", a.destroy) &&
                  resolve(lib, "cublasLtMatmul", a.matmul) &&
                  resolve(lib, "cublasLtMatmulAlgoGetHeuristic", a.algo_get_heuristic) &&
                  resolve(lib, "cublasLtMatmulDescCreate", a.desc_create) &&
                  resolve(lib, "cublasLtMatmulDescDestroy", a.desc_destroy) &&
                  resolve(lib, "cublasLtMatmulDescSetAttribute", a.desc_set_attribute) &&
                  resolve(lib, "cublasLtMatmulPreferenceCreate", a.preference_create) &&
                  resolve(lib, "cublasLtMatmulPreferenceDestroy", a.preference_destroy) &&
                  resolve(lib, "cublasLtMatmulPreferenceSetAttribute", a.preference_set_attribute) &&
                  resolve(lib, "cublasLtMatrixLayoutCreate", a.layout_create) &&
                  resolve(lib, "cublasLtMatrixLayoutDestroy", a.layout_destroy);
  if (!ok) l.status = make_error(ErrorCode::kUnavailable, "the cuBLASLt library found lacks an entry point hearth uses");
  return l;
}
#endif

const CublasLtLibrary& cublaslt_library() {
  static const CublasLtLibrary lib = load_cublaslt();
  return lib;
}

}  // namespace

Result<const CublasLtApi*> cublaslt_load() {
  const CublasLtLibrary& l = cublaslt_library();
  if (!l.status.is_ok()) return l.status;
  return &l.api;
}

const CublasLtApi& cublaslt() {
  const CublasLtLibrary& l = cublaslt_library();
  HEARTH_CHECK(l.status.is_ok()) << "cuBLASLt used before it was loaded: " << l.status.message();
  return l.api;
}

void CublasLtTraits::release(cublasLtHandle_t h) noexcept {
  if (const cublasStatus_t s = cublaslt().destroy(h); s != CUBLAS_STATUS_SUCCESS) {
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
  HEARTH_ASSIGN_OR_RETURN(const CublasLtApi* api, cublaslt_load());
  cublasLtHandle_t h = nullptr;
  if (const cublasStatus_t s = api->create(&h); s != CUBLAS_STATUS_SUCCESS) {
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
