// Move-only owners of CUDA handles: streams, events, device and pinned host buffers,
// cuBLASLt handles. Each is created by a factory that returns a Result with a message a
// person can act on (what failed, how much was asked, how much is free), and released
// by a noexcept destructor that only logs. Built only with the CUDA backend
// (HEARTH_HAVE_CUDA). Thread-compatible: one owner at a time.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "common/status.h"

namespace hearth {

// "cudaErrorMemoryAllocation (out of memory)".
std::string cuda_error_text(cudaError_t e);
// A Status of code kInternal (kResourceExhausted for out of memory) for a failed call.
Status cuda_status(cudaError_t e, std::string_view what);

// Whether `e` leaves the context unusable (an illegal address, a launch failure, an
// uncorrectable ECC error...): after one the process must exit, and its group restart.
bool cuda_error_is_sticky(cudaError_t e);

template <typename T, typename Traits>
class CudaHandle {
 public:
  CudaHandle() = default;
  explicit CudaHandle(T h) : h_(h) {}
  CudaHandle(CudaHandle&& o) noexcept : h_(std::exchange(o.h_, T{})) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, T{});
    }
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  ~CudaHandle() { reset(); }
  T get() const { return h_; }
  explicit operator bool() const { return h_ != T{}; }

 private:
  void reset() noexcept {
    if (h_ != T{}) Traits::release(h_);
    h_ = T{};
  }
  T h_{};
};

struct CudaStreamTraits {
  static void release(cudaStream_t s) noexcept;
};
struct CudaEventTraits {
  static void release(cudaEvent_t e) noexcept;
};
struct CublasLtTraits {
  static void release(cublasLtHandle_t h) noexcept;
};
using CudaStream = CudaHandle<cudaStream_t, CudaStreamTraits>;
using CudaEvent = CudaHandle<cudaEvent_t, CudaEventTraits>;
using CublasLtHandle = CudaHandle<cublasLtHandle_t, CublasLtTraits>;

// cuBLASLt's entry points, reached through dlopen when the first handle is created: the
// library's initializers cost ~0.3 s, which an engine on a CPU-only host (or one that
// never runs a 16-bit product) should not pay at every start. Thread-safe to load.
struct CublasLtApi {
  decltype(&::cublasLtCreate) create;
  decltype(&::cublasLtDestroy) destroy;
  decltype(&::cublasLtMatmul) matmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) algo_get_heuristic;
  decltype(&::cublasLtMatmulDescCreate) desc_create;
  decltype(&::cublasLtMatmulDescDestroy) desc_destroy;
  decltype(&::cublasLtMatmulDescSetAttribute) desc_set_attribute;
  decltype(&::cublasLtMatmulPreferenceCreate) preference_create;
  decltype(&::cublasLtMatmulPreferenceDestroy) preference_destroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) preference_set_attribute;
  decltype(&::cublasLtMatrixLayoutCreate) layout_create;
  decltype(&::cublasLtMatrixLayoutDestroy) layout_destroy;
};
// Loads the library once (kUnavailable naming what was looked for when it is missing).
Result<const CublasLtApi*> cublaslt_load();
// The loaded entry points; only after cublaslt_load() (or cublaslt_create()) succeeded.
const CublasLtApi& cublaslt();

Result<CudaStream> cuda_stream_create();
Result<CudaEvent> cuda_event_create();
Result<CublasLtHandle> cublaslt_create();

// Device memory (cudaMalloc) or pinned host memory (cudaMallocHost), freed when the
// owner dies.
class DeviceBuffer {
 public:
  enum class Kind : uint8_t { kDevice, kPinnedHost };
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), kind_(o.kind_) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      kind_ = o.kind_;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }

  // `what` names the allocation in the out-of-memory message ("the KV cache").
  static Result<DeviceBuffer> device(size_t bytes, std::string_view what);
  static Result<DeviceBuffer> pinned_host(size_t bytes, std::string_view what);

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  // Gives up ownership: the caller frees data() (cudaFree / cudaFreeHost).
  void* release() {
    bytes_ = 0;
    return std::exchange(data_, nullptr);
  }

 private:
  void reset() noexcept;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Kind kind_ = Kind::kDevice;
};

}  // namespace hearth
