#include "ipc/device_memory.h"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

namespace hearth {
namespace {

// The driver functions this file uses, looked up once through the runtime.
struct Driver {
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&::cuMemGetAllocationPropertiesFromHandle) properties = nullptr;
  std::string missing;  // the first function that could not be found
};

template <typename F>
void lookup(const char* name, F& f, std::string& missing) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess || p == nullptr) {
    if (missing.empty()) missing = name;
    return;
  }
  f = reinterpret_cast<F>(p);
}

const Driver& driver() {
  static const Driver entry_points = [] {
    Driver d;
    lookup("cuDeviceGet", d.device_get, d.missing);
    lookup("cuDeviceGetAttribute", d.device_attribute, d.missing);
    lookup("cuGetErrorString", d.error_string, d.missing);
    lookup("cuMemGetAllocationGranularity", d.granularity, d.missing);
    lookup("cuMemCreate", d.create, d.missing);
    lookup("cuMemRelease", d.release, d.missing);
    lookup("cuMemAddressReserve", d.reserve, d.missing);
    lookup("cuMemAddressFree", d.address_free, d.missing);
    lookup("cuMemMap", d.map, d.missing);
    lookup("cuMemUnmap", d.unmap, d.missing);
    lookup("cuMemSetAccess", d.set_access, d.missing);
    lookup("cuMemExportToShareableHandle", d.export_handle, d.missing);
    lookup("cuMemImportFromShareableHandle", d.import_handle, d.missing);
    lookup("cuMemGetAllocationPropertiesFromHandle", d.properties, d.missing);
    return d;
  }();
  return entry_points;
}

Status runtime_error(cudaError_t e, std::string_view what) {
  const ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::kResourceExhausted
                         : (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) ? ErrorCode::kUnavailable
                                                                                        : ErrorCode::kIo;
  return make_error(code, "{}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

Status driver_error(CUresult r, std::string_view what) {
  const char* text = nullptr;
  if (driver().error_string != nullptr) driver().error_string(r, &text);
  const ErrorCode code = r == CUDA_ERROR_OUT_OF_MEMORY ? ErrorCode::kResourceExhausted
                         : r == CUDA_ERROR_NOT_SUPPORTED ? ErrorCode::kUnsupported
                                                         : ErrorCode::kIo;
  return make_error(code, "{}: {} (CUresult {})", what, text != nullptr ? text : "unknown error", static_cast<int>(r));
}

// Makes `device` current with its primary context, and the driver functions available.
Status use_device(int device) {
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return runtime_error(e, fmt::format("cannot use CUDA device {}", device));
  }
  if (const cudaError_t e = cudaFree(nullptr); e != cudaSuccess) {
    return runtime_error(e, fmt::format("cannot create a context on CUDA device {}", device));
  }
  if (!driver().missing.empty()) {
    return make_error(ErrorCode::kUnavailable, "the CUDA driver has no {} (a driver for CUDA 12 or later is needed)",
                      driver().missing);
  }
  return Status::ok();
}

CUmemAllocationProp allocation_prop(CUdevice dev) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Reserves an address range for `bytes` of `handle`, maps it and allows `dev` to read and
// write it; on failure undoes what it did (the handle stays the caller's).
Result<void*> map_handle(CUmemGenericAllocationHandle handle, size_t bytes, CUdevice dev, size_t alignment) {
  const Driver& d = driver();
  CUdeviceptr ptr = 0;
  if (CUresult r = d.reserve(&ptr, bytes, alignment, 0, 0); r != CUDA_SUCCESS) {
    return driver_error(r, "reserving device addresses");
  }
  if (CUresult r = d.map(ptr, bytes, 0, handle, 0); r != CUDA_SUCCESS) {
    d.address_free(ptr, bytes);
    return driver_error(r, "mapping device memory");
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = dev;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (CUresult r = d.set_access(ptr, bytes, &access, 1); r != CUDA_SUCCESS) {
    d.unmap(ptr, bytes);
    d.address_free(ptr, bytes);
    return driver_error(r, "allowing access to device memory");
  }
  return reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
}

std::string hex(const void* data, size_t n) {
  std::string out;
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", b[i]);
  return out;
}

}  // namespace

Result<DeviceIdentity> device_identity(int device) {
  cudaDeviceProp prop{};
  if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return runtime_error(e, fmt::format("cannot read CUDA device {}", device));
  }
  const std::string h = hex(prop.uuid.bytes, sizeof(prop.uuid.bytes));
  DeviceIdentity id;
  id.device = device;
  id.uuid = fmt::format("GPU-{}-{}-{}-{}-{}", h.substr(0, 8), h.substr(8, 4), h.substr(12, 4), h.substr(16, 4),
                        h.substr(20, 12));
  id.compute_capability = prop.major * 10 + prop.minor;
  return id;
}

bool vmm_fd_supported(int device, std::string* why) {
  if (Status st = use_device(device); !st.is_ok()) {
    if (why != nullptr) *why = st.message();
    return false;
  }
  const Driver& d = driver();
  CUdevice dev = 0;
  int vmm = 0, fd = 0;
  if (d.device_get(&dev, device) != CUDA_SUCCESS ||
      d.device_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) != CUDA_SUCCESS ||
      d.device_attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev) != CUDA_SUCCESS) {
    if (why != nullptr) *why = fmt::format("cannot read CUDA device {}'s attributes", device);
    return false;
  }
  if (vmm == 0 || fd == 0) {
    if (why != nullptr) {
      *why = fmt::format("CUDA device {} does not support {}", device,
                         vmm == 0 ? "the virtual memory management API" : "POSIX file descriptor handles");
    }
    return false;
  }
  return true;
}

Result<SharedDeviceMemory> SharedDeviceMemory::allocate(int device, size_t bytes, std::string_view what) {
  HEARTH_RETURN_IF_ERROR(use_device(device));
  const Driver& d = driver();
  CUdevice dev = 0;
  if (CUresult r = d.device_get(&dev, device); r != CUDA_SUCCESS) return driver_error(r, "cuDeviceGet");
  const CUmemAllocationProp prop = allocation_prop(dev);
  size_t granularity = 0;
  if (CUresult r = d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED); r != CUDA_SUCCESS) {
    return driver_error(r, "reading the allocation granularity");
  }
  const size_t rounded = (std::max<size_t>(bytes, 1) + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = d.create(&handle, rounded, &prop, 0); r != CUDA_SUCCESS) {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    Status st = driver_error(r, fmt::format("allocating {} MiB for {} on CUDA device {} ({} MiB free of {} MiB)",
                                            rounded >> 20, what, device, free_bytes >> 20, total >> 20));
    return st;
  }
  auto mapped = map_handle(handle, rounded, dev, granularity);
  if (!mapped.is_ok()) {
    d.release(handle);
    return mapped.status();
  }
  return SharedDeviceMemory(Kind::kVmm, *mapped, rounded, device, handle);
}

Result<SharedDeviceMemory> SharedDeviceMemory::import_fd(int device, int fd, size_t bytes) {
  HEARTH_RETURN_IF_ERROR(use_device(device));
  const Driver& d = driver();
  CUdevice dev = 0;
  if (CUresult r = d.device_get(&dev, device); r != CUDA_SUCCESS) return driver_error(r, "cuDeviceGet");
  CUmemGenericAllocationHandle handle = 0;
  if (CUresult r = d.import_handle(&handle, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      r != CUDA_SUCCESS) {
    return driver_error(r, "importing a device slab's fd");
  }
  CUmemAllocationProp prop{};
  if (CUresult r = d.properties(&prop, handle); r != CUDA_SUCCESS) {
    d.release(handle);
    return driver_error(r, "reading an imported slab's properties");
  }
  if (prop.location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop.location.id != dev) {
    d.release(handle);
    return make_error(ErrorCode::kFormat, "the imported slab lives on device {}, not on CUDA device {}",
                      prop.location.id, device);
  }
  size_t granularity = 0;
  if (CUresult r = d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM); r != CUDA_SUCCESS) {
    d.release(handle);
    return driver_error(r, "reading the allocation granularity");
  }
  if (bytes == 0 || bytes % granularity != 0) {
    d.release(handle);
    return make_error(ErrorCode::kFormat, "a slab of {} bytes is not a multiple of the device's granularity ({})",
                      bytes, granularity);
  }
  // cuMemMap refuses a size past the allocation's end: a slab smaller than claimed fails here.
  auto mapped = map_handle(handle, bytes, dev, granularity);
  if (!mapped.is_ok()) {
    d.release(handle);
    return mapped.status().with_context(fmt::format("mapping an imported slab of {} bytes", bytes));
  }
  return SharedDeviceMemory(Kind::kVmm, *mapped, bytes, device, handle);
}

Result<SharedDeviceMemory> SharedDeviceMemory::allocate_legacy(int device, size_t bytes, std::string_view what) {
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return runtime_error(e, fmt::format("cannot use CUDA device {}", device));
  }
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    return runtime_error(e, fmt::format("allocating {} MiB for {} on CUDA device {} ({} MiB free of {} MiB)",
                                        bytes >> 20, what, device, free_bytes >> 20, total >> 20));
  }
  return SharedDeviceMemory(Kind::kLegacyOwner, p, bytes, device, 0);
}

Result<SharedDeviceMemory> SharedDeviceMemory::import_legacy(int device, std::string_view handle_hex, size_t bytes) {
  cudaIpcMemHandle_t handle{};
  if (handle_hex.size() != 2 * sizeof(handle.reserved)) {
    return make_error(ErrorCode::kFormat, "a CUDA IPC handle is {} hex digits, not {}", 2 * sizeof(handle.reserved),
                      handle_hex.size());
  }
  for (size_t i = 0; i < sizeof(handle.reserved); ++i) {
    unsigned v = 0;
    if (std::sscanf(std::string(handle_hex.substr(2 * i, 2)).c_str(), "%2x", &v) != 1) {
      return make_error(ErrorCode::kFormat, "a CUDA IPC handle holds a non-hex digit");
    }
    handle.reserved[i] = static_cast<char>(v);
  }
  if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
    return runtime_error(e, fmt::format("cannot use CUDA device {}", device));
  }
  void* p = nullptr;
  if (const cudaError_t e = cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess); e != cudaSuccess) {
    return runtime_error(e, "opening a CUDA IPC handle (its exporter may have exited)");
  }
  return SharedDeviceMemory(Kind::kLegacyImport, p, bytes, device, 0);
}

SharedDeviceMemory::SharedDeviceMemory(SharedDeviceMemory&& other) noexcept { *this = std::move(other); }

SharedDeviceMemory& SharedDeviceMemory::operator=(SharedDeviceMemory&& other) noexcept {
  if (this != &other) {
    reset();
    kind_ = std::exchange(other.kind_, Kind::kNone);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, 0);
  }
  return *this;
}

SharedDeviceMemory::~SharedDeviceMemory() { reset(); }

void SharedDeviceMemory::reset() noexcept {
  switch (kind_) {
    case Kind::kNone:
      break;
    case Kind::kVmm: {
      const Driver& d = driver();
      const auto ptr = static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(data_));
      d.unmap(ptr, bytes_);
      d.address_free(ptr, bytes_);
      d.release(handle_);
      break;
    }
    case Kind::kLegacyOwner:
      cudaSetDevice(device_);
      cudaFree(data_);
      break;
    case Kind::kLegacyImport:
      cudaSetDevice(device_);
      cudaIpcCloseMemHandle(data_);
      break;
  }
  kind_ = Kind::kNone;
  data_ = nullptr;
}

Result<UniqueFd> SharedDeviceMemory::export_fd() const {
  if (kind_ != Kind::kVmm) return make_error(ErrorCode::kUnsupported, "only a VMM allocation exports an fd");
  int fd = -1;
  if (CUresult r = driver().export_handle(&fd, handle_, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
      r != CUDA_SUCCESS) {
    return driver_error(r, "exporting a device slab as an fd");
  }
  return UniqueFd(fd);
}

Result<std::string> SharedDeviceMemory::legacy_handle_hex() const {
  if (kind_ != Kind::kLegacyOwner) return make_error(ErrorCode::kUnsupported, "only a legacy allocation has an IPC handle");
  cudaIpcMemHandle_t handle{};
  if (const cudaError_t e = cudaIpcGetMemHandle(&handle, data_); e != cudaSuccess) {
    return runtime_error(e, "cudaIpcGetMemHandle");
  }
  return hex(handle.reserved, sizeof(handle.reserved));
}

}  // namespace hearth
