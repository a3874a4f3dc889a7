// The driver's virtual memory management on memfds, with the driver's lifetime rule: an
// allocation (cuMemCreate: a memfd named for its device) lives while any handle, exported
// fd or mapping refers to it, in any process. cuMemAddressReserve reserves addresses
// with an inaccessible mapping, cuMemMap maps the memfd there, cuMemSetAccess makes it
// readable and writable and registers it as device memory.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "cuda.h"
#include "kernels/cuda/emu/internal.h"

namespace hearth::emu {
namespace {

constexpr size_t kGranularity = 2u << 20;  // what H100s and A100s report
constexpr const char* kMemfdPrefix = "hearth-emu-vmm:dev";

struct Handle {
  int fd = -1;
  size_t bytes = 0;
  int device = 0;
  bool charged = false;  // created here (not imported): counted against the device
};

std::mutex g_mu;
std::map<CUdeviceptr, size_t> g_mappings;  // a mapped range's start -> its device
std::map<CUdeviceptr, std::pair<void*, size_t>> g_reserved_maps;  // aligned start -> the whole reservation

Handle* handle_of(CUmemGenericAllocationHandle h) { return reinterpret_cast<Handle*>(static_cast<uintptr_t>(h)); }

bool valid_device(int d) { return d >= 0 && d < device_count(); }

// The device a memfd of kMemfdPrefix was made for, or -1 for any other fd.
int memfd_device(int fd) {
  char link[256] = {};
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = readlink(path.c_str(), link, sizeof link - 1);
  if (n <= 0) return -1;
  const std::string target(link, static_cast<size_t>(n));
  const std::string prefix = std::string("/memfd:") + kMemfdPrefix;
  if (target.rfind(prefix, 0) != 0) return -1;
  return std::atoi(target.c_str() + prefix.size());
}

}  // namespace
}  // namespace hearth::emu

using namespace hearth::emu;  // NOLINT: the driver's C-style entry points below

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: *value = 1; return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
    case CUDA_SUCCESS: *text = "no error"; break;
    case CUDA_ERROR_INVALID_VALUE: *text = "invalid argument"; break;
    case CUDA_ERROR_OUT_OF_MEMORY: *text = "out of memory"; break;
    case CUDA_ERROR_NOT_INITIALIZED: *text = "initialization error"; break;
    case CUDA_ERROR_INVALID_DEVICE: *text = "invalid device ordinal"; break;
    case CUDA_ERROR_INVALID_HANDLE: *text = "invalid resource handle"; break;
    case CUDA_ERROR_NOT_SUPPORTED: *text = "operation not supported"; break;
    default: *text = "unknown error"; return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                       CUmemAllocationGranularity_flags) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0 || size == 0 || size % kGranularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
  if (!charge(prop->location.id, size)) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::string name = kMemfdPrefix + std::to_string(prop->location.id);
  const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    uncharge(prop->location.id, size);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* h = new Handle{fd, size, prop->location.id, true};
  *handle = static_cast<CUmemGenericAllocationHandle>(reinterpret_cast<uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  Handle* h = handle_of(handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  close(h->fd);
  if (h->charged) uncharge(h->device, h->bytes);
  delete h;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags) {
  if (ptr == nullptr || size == 0 || size % kGranularity != 0 || addr != 0 || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t align = alignment == 0 ? kGranularity : alignment;
  void* m = mmap(nullptr, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = (reinterpret_cast<uintptr_t>(m) + align - 1) / align * align;
  std::lock_guard lock(g_mu);
  g_reserved_maps[start] = {m, size + align};
  *ptr = start;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t) {
  std::lock_guard lock(g_mu);
  auto it = g_reserved_maps.find(ptr);
  if (it == g_reserved_maps.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(it->second.first, it->second.second);
  g_reserved_maps.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
  Handle* h = handle_of(handle);
  if (h == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  // As the driver does, a range past the allocation's end is refused.
  if (flags != 0 || size == 0 || offset + size > h->bytes || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  void* at = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  if (mmap(at, size, PROT_NONE, MAP_SHARED | MAP_FIXED, h->fd, static_cast<off_t>(offset)) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::lock_guard lock(g_mu);
  g_mappings[ptr] = static_cast<size_t>(h->device);
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  void* at = reinterpret_cast<void*>(static_cast<uintptr_t>(ptr));
  int device = 0;
  {
    std::lock_guard lock(g_mu);
    auto it = g_mappings.find(ptr);
    if (it == g_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    device = static_cast<int>(it->second);
    g_mappings.erase(it);
  }
  drain_device(device);  // as the driver does, work that may read the range finishes first
  unregister_device_range(at);
  // Back to a reserved range: the mapping's reference to the memfd goes.
  mmap(at, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return CUDA_SUCCESS;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  {
    std::lock_guard lock(g_mu);
    auto it = g_mappings.find(ptr);
    if (it == g_mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    device = static_cast<int>(it->second);
  }
  const int prot = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE ? PROT_READ | PROT_WRITE
                   : desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READ   ? PROT_READ
                                                                      : PROT_NONE;
  if (mprotect(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)), size, prot) != 0) return CUDA_ERROR_INVALID_VALUE;
  register_device_range(reinterpret_cast<void*>(static_cast<uintptr_t>(ptr)), size, device);
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType type, unsigned long long) {
  Handle* h = handle_of(handle);
  if (h == nullptr || shareable == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  return CUDA_SUCCESS;
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* os_handle,
                                        CUmemAllocationHandleType type) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_NOT_SUPPORTED;
  const int given = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  const int device = memfd_device(given);
  struct stat st {};
  if (device < 0 || fstat(given, &st) != 0) return CUDA_ERROR_INVALID_VALUE;  // not a device allocation's fd
  const int fd = fcntl(given, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  auto* h = new Handle{fd, static_cast<size_t>(st.st_size), device, false};
  *handle = static_cast<CUmemGenericAllocationHandle>(reinterpret_cast<uintptr_t>(h));
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop, CUmemGenericAllocationHandle handle) {
  Handle* h = handle_of(handle);
  if (h == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *prop = {};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop->location.id = h->device;
  return CUDA_SUCCESS;
}

namespace hearth::emu {

void* driver_entry_point(const char* name) {
  struct Entry {
    const char* name;
    void* fn;
  };
  static const Entry entries[] = {
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDeviceGetAttribute", reinterpret_cast<void*>(&cuDeviceGetAttribute)},
      {"cuGetErrorString", reinterpret_cast<void*>(&cuGetErrorString)},
      {"cuMemGetAllocationGranularity", reinterpret_cast<void*>(&cuMemGetAllocationGranularity)},
      {"cuMemCreate", reinterpret_cast<void*>(&cuMemCreate)},
      {"cuMemRelease", reinterpret_cast<void*>(&cuMemRelease)},
      {"cuMemAddressReserve", reinterpret_cast<void*>(&cuMemAddressReserve)},
      {"cuMemAddressFree", reinterpret_cast<void*>(&cuMemAddressFree)},
      {"cuMemMap", reinterpret_cast<void*>(&cuMemMap)},
      {"cuMemUnmap", reinterpret_cast<void*>(&cuMemUnmap)},
      {"cuMemSetAccess", reinterpret_cast<void*>(&cuMemSetAccess)},
      {"cuMemExportToShareableHandle", reinterpret_cast<void*>(&cuMemExportToShareableHandle)},
      {"cuMemImportFromShareableHandle", reinterpret_cast<void*>(&cuMemImportFromShareableHandle)},
      {"cuMemGetAllocationPropertiesFromHandle", reinterpret_cast<void*>(&cuMemGetAllocationPropertiesFromHandle)},
  };
  for (const Entry& e : entries) {
    if (std::strcmp(e.name, name) == 0) return e.fn;
  }
  return nullptr;
}

}  // namespace hearth::emu
