// hearth-loader --device cuda: each tensor-parallel rank's weights also in device memory,
// in a slab that outlives the loader (ipc/device_memory.h), served to engine ranks at
// hearth.<instance>.slabs.sock (ipc/slab_channel.h).
//
// A slab is a byte copy of its rank's data region of the weights segment. Before copying,
// the loader asks its fd stores (ipc/fd_store.h: systemd's, or `hearth serve`'s holder)
// for slabs an earlier loader kept; one whose record matches (rank, GPU uuid, compute
// capability, data size, weights fingerprint) and whose first and last pages equal the
// host copy is adopted without copying. Others are forgotten. Fresh slabs are copied from
// the segment in /dev/shm (pinned where the driver can register it), never from the
// model file, and given to every store. Where the device cannot share VMM allocations
// through fds, a legacy CUDA IPC allocation is made instead, and the log says that it
// dies with this loader. Built everywhere; without CUDA, publish says so.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json.hpp>

#include "common/status.h"
#include "loader/resident.h"

namespace hearth {

enum class DeviceSharing { kAuto, kVmm, kCudaIpc };

struct DeviceSlabOptions {
  std::vector<int> devices;  // the CUDA ordinal of each rank
  DeviceSharing sharing = DeviceSharing::kAuto;
  std::filesystem::path shm_dir;  // where the slab socket goes
  std::string instance = "default";
};

// "cuda" -> ranks on devices 0..tp-1; "cuda:A,B,..." -> one ordinal per rank.
Result<std::vector<int>> device_list_from_name(std::string_view name, int tp);
Result<DeviceSharing> device_sharing_from_name(std::string_view name);  // auto, vmm, cuda-ipc

class DeviceSlabs {
 public:
  virtual ~DeviceSlabs() = default;
  // One object per slab for the ready line: rank, device, handle, adopted, bytes, seconds.
  virtual boost::json::array describe() const = 0;
};

// Whether the devices are there (and the build has CUDA), before the model is read.
Status device_slabs_check(const DeviceSlabOptions& options);

Result<std::unique_ptr<DeviceSlabs>> device_slabs_publish(const ResidentSegment& resident,
                                                          const DeviceSlabOptions& options);

}  // namespace hearth
