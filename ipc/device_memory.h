// Device memory that other processes can map: the CUDA virtual memory API (cuMemCreate
// with a POSIX file descriptor as the shareable handle) where the device supports it, the
// legacy cudaIpcGetMemHandle elsewhere. hearth-loader allocates a rank's weight slab and
// exports it; engine ranks import it and read the weights in place.
//
// A VMM allocation lives while any handle, fd or mapping refers to it, so a slab outlives
// the process that made it as long as someone keeps its fd (ipc/fd_store.h). A legacy
// allocation dies with its exporter.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion: nothing links
// libcuda, so the binaries load on machines without a driver (CI), where every function
// here fails with kUnavailable. Compiled only when nvcc is found (HEARTH_HAVE_CUDA).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/unique_fd.h"

namespace hearth {

struct DeviceIdentity {
  int device = 0;
  std::string uuid;            // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
  int compute_capability = 0;  // 90 for sm_90
};
Result<DeviceIdentity> device_identity(int device);

// Whether `device` supports the VMM API with POSIX fd handles; when not, `why` says so.
bool vmm_fd_supported(int device, std::string* why);

class SharedDeviceMemory {
 public:
  // A new VMM allocation of at least `bytes` (rounded up to the device's granularity),
  // mapped read-write into this process.
  static Result<SharedDeviceMemory> allocate(int device, size_t bytes, std::string_view what);
  // Maps the allocation behind `fd` (from export_fd in another process). kFormat when it
  // is smaller than `bytes` or lives on another device.
  static Result<SharedDeviceMemory> import_fd(int device, int fd, size_t bytes);
  // cudaMalloc'd memory with a legacy IPC handle (handle_hex).
  static Result<SharedDeviceMemory> allocate_legacy(int device, size_t bytes, std::string_view what);
  // Opens another process's legacy allocation of `bytes` (the exporter's word: a legacy
  // handle does not carry its size).
  static Result<SharedDeviceMemory> import_legacy(int device, std::string_view handle_hex, size_t bytes);

  SharedDeviceMemory() = default;
  SharedDeviceMemory(SharedDeviceMemory&& other) noexcept;
  SharedDeviceMemory& operator=(SharedDeviceMemory&& other) noexcept;
  SharedDeviceMemory(const SharedDeviceMemory&) = delete;
  SharedDeviceMemory& operator=(const SharedDeviceMemory&) = delete;
  ~SharedDeviceMemory();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  bool legacy() const { return kind_ == Kind::kLegacyOwner || kind_ == Kind::kLegacyImport; }

  // A new POSIX fd for the allocation (VMM only); each call exports a fresh one.
  Result<UniqueFd> export_fd() const;
  // The legacy IPC handle as 128 hex digits (allocate_legacy only).
  Result<std::string> legacy_handle_hex() const;

 private:
  enum class Kind { kNone, kVmm, kLegacyOwner, kLegacyImport };
  SharedDeviceMemory(Kind kind, void* data, size_t bytes, int device, unsigned long long handle)
      : kind_(kind), data_(data), bytes_(bytes), device_(device), handle_(handle) {}
  void reset() noexcept;

  Kind kind_ = Kind::kNone;
  void* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
  unsigned long long handle_ = 0;  // CUmemGenericAllocationHandle (VMM)
};

}  // namespace hearth
