#include "loader/device_slabs.h"

#include <charconv>
#include <chrono>

#include "common/log.h"

#if HEARTH_HAVE_CUDA
#include <cuda_runtime.h>

#include <cstring>

#include "ipc/fd_store.h"
#include "ipc/slab_channel.h"
#include "kernels/cuda/device_info.h"
#include "ipc/device_memory.h"
#endif

namespace hearth {

Result<std::vector<int>> device_list_from_name(std::string_view name, int tp) {
  std::vector<int> out;
  if (name == "cuda") {
    for (int r = 0; r < tp; ++r) out.push_back(r);
    return out;
  }
  if (!name.starts_with("cuda:")) {
    return make_error(ErrorCode::kInvalidArgument, "--device \"{}\" is not cuda or cuda:N[,N...]", name);
  }
  std::string_view list = name.substr(5);
  while (true) {
    const size_t comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    int v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 0 || v > 1023) {
      return make_error(ErrorCode::kInvalidArgument, "--device \"{}\": \"{}\" is not a CUDA device index", name, item);
    }
    out.push_back(v);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  if (static_cast<int>(out.size()) != tp) {
    return make_error(ErrorCode::kInvalidArgument, "--device \"{}\" names {} device{} for {} rank{} (--tp {})", name,
                      out.size(), out.size() == 1 ? "" : "s", tp, tp == 1 ? "" : "s", tp);
  }
  for (size_t i = 0; i < out.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (out[i] == out[j]) {
        return make_error(ErrorCode::kInvalidArgument, "--device \"{}\" puts two ranks on CUDA device {}", name, out[i]);
      }
    }
  }
  return out;
}

Result<DeviceSharing> device_sharing_from_name(std::string_view name) {
  if (name == "auto") return DeviceSharing::kAuto;
  if (name == "vmm") return DeviceSharing::kVmm;
  if (name == "cuda-ipc") return DeviceSharing::kCudaIpc;
  return make_error(ErrorCode::kInvalidArgument, "--device-sharing \"{}\" is not auto, vmm or cuda-ipc", name);
}

#if !HEARTH_HAVE_CUDA

Status device_slabs_check(const DeviceSlabOptions&) {
  return make_error(ErrorCode::kUnsupported,
                    "this hearth-loader was built without CUDA (nvcc was not found when it was configured); "
                    "--device needs a build with the CUDA toolkit");
}

Result<std::unique_ptr<DeviceSlabs>> device_slabs_publish(const ResidentSegment&, const DeviceSlabOptions& options) {
  return device_slabs_check(options);
}

#else

namespace {

namespace cu = kernels::cuda;
using Clock = std::chrono::steady_clock;

constexpr size_t kProbeBytes = 4096;

struct Slab {
  SharedDeviceMemory memory;
  ServedSlab served;
  double seconds = 0;
};

Status cuda_error(cudaError_t e, std::string_view what) {
  return make_error(ErrorCode::kIo, "{}: {}", what, cudaGetErrorString(e));
}

// Copies the rank's host region to the slab: from pinned pages where the driver can
// register the segment's mapping, else through the driver's own staging.
Status upload(const std::byte* host, size_t bytes, void* device) {
  const bool pinned = cudaHostRegister(const_cast<std::byte*>(host), bytes, cudaHostRegisterDefault) == cudaSuccess;
  if (!pinned) {
    cudaGetLastError();  // clear the registration failure
    HEARTH_LOG_WARN("cannot pin the segment's pages for the copy; copying through the driver's staging (slower)");
  }
  const cudaError_t e = cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice);
  if (pinned) cudaHostUnregister(const_cast<std::byte*>(host));
  return e == cudaSuccess ? Status::ok() : cuda_error(e, "copying the weights to the device");
}

// Whether the slab's first and last pages hold the host region's bytes: a cheap check
// that an adopted slab is the copy its name claims.
Result<bool> same_ends(const void* device, const std::byte* host, size_t bytes) {
  const size_t n = std::min(kProbeBytes, bytes);
  std::vector<std::byte> probe(n);
  for (const size_t offset : {size_t{0}, bytes - n}) {
    if (const cudaError_t e = cudaMemcpy(probe.data(), static_cast<const std::byte*>(device) + offset, n,
                                         cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      return cuda_error(e, "reading an adopted slab back");
    }
    if (std::memcmp(probe.data(), host + offset, n) != 0) return false;
  }
  return true;
}

// Out of device memory: what to change.
Status with_memory_hint(const Status& st) {
  if (st.code() != ErrorCode::kResourceExhausted) return st;
  return Status(st.code(), st.message() + "; load smaller weights (--quant int8 or int4) or split them over more GPUs "
                                          "(--tp)");
}

class CudaSlabs final : public DeviceSlabs {
 public:
  std::vector<Slab> slabs;
  std::vector<boost::json::object> summary;
  std::unique_ptr<SlabServer> server;

  boost::json::array describe() const override {
    boost::json::array out;
    for (const auto& o : summary) out.push_back(o);
    return out;
  }
};

}  // namespace

Status device_slabs_check(const DeviceSlabOptions& options) {
  const int count = cu::device_count();
  if (count == 0) {
    return make_error(ErrorCode::kUnavailable, "--device: no CUDA device is visible to this process (check the driver, "
                      "nvidia-smi and CUDA_VISIBLE_DEVICES)");
  }
  for (const int d : options.devices) {
    if (d >= count) {
      return make_error(ErrorCode::kInvalidArgument, "--device: CUDA device {} does not exist; this machine has {} "
                        "(0..{})", d, count, count - 1);
    }
  }
  return Status::ok();
}

Result<std::unique_ptr<DeviceSlabs>> device_slabs_publish(const ResidentSegment& resident,
                                                          const DeviceSlabOptions& options) {
  const WeightsHeader& h = *reinterpret_cast<const WeightsHeader*>(resident.segment.data());
  if (options.devices.size() != h.tp_size) {
    return make_error(ErrorCode::kInvalidArgument, "{} devices for {} ranks", options.devices.size(), h.tp_size);
  }
  if (std::string_view(h.layout) != kLayoutPlain) {
    return make_error(ErrorCode::kInvalidArgument, "device slabs hold the \"plain\" layout, and the segment is \"{}\"",
                      h.layout);
  }
  HEARTH_RETURN_IF_ERROR(device_slabs_check(options));
  auto stores = fd_stores_from_environment();
  std::vector<std::pair<KeptFd, FdStore*>> kept;
  for (auto& store : stores) {
    auto got = store->kept(kSlabNamePrefix);
    if (!got.is_ok()) {
      HEARTH_LOG_WARN("cannot ask {} for kept slabs: {}", store->kind(), got.status().to_string());
      continue;
    }
    for (KeptFd& k : *got) kept.emplace_back(std::move(k), store.get());
  }

  auto out = std::make_unique<CudaSlabs>();
  for (uint32_t rank = 0; rank < h.tp_size; ++rank) {
    const int device = options.devices[rank];
    const auto start = Clock::now();
    HEARTH_ASSIGN_OR_RETURN(DeviceIdentity id, device_identity(device));
    const std::byte* host = resident.segment.data() + h.rank_offset[rank];
    const size_t data_bytes = h.rank_bytes[rank];
    SlabRecord want;
    want.rank = static_cast<int>(rank);
    want.device = device;
    want.device_uuid = id.uuid;
    want.compute_capability = id.compute_capability;
    want.data_bytes = data_bytes;
    want.weights = resident.fingerprint;

    Slab slab;
    for (auto& [k, store] : kept) {
      if (!k.fd) continue;
      auto rec = slab_record_from_store_name(k.name);
      if (!rec.is_ok() || rec->rank != want.rank || rec->device_uuid != want.device_uuid ||
          rec->compute_capability != want.compute_capability || rec->data_bytes != want.data_bytes ||
          !(rec->weights == want.weights)) {
        continue;
      }
      auto memory = SharedDeviceMemory::import_fd(device, k.fd.get(), rec->bytes);
      if (!memory.is_ok()) {
        HEARTH_LOG_WARN("rank {}: the slab kept by {} cannot be mapped ({}); copying again", rank, store->kind(),
                        memory.status().to_string());
        continue;
      }
      auto same = same_ends(memory->data(), host, data_bytes);
      if (!same.is_ok() || !*same) {
        HEARTH_LOG_WARN("rank {}: the slab kept by {} does not hold this segment's bytes; copying again", rank,
                        store->kind());
        continue;
      }
      slab.memory = std::move(*memory);
      slab.served.record = *rec;
      slab.served.record.device = device;
      slab.served.fd = std::move(k.fd);
      slab.served.adopted = true;
      slab.served.held_by.emplace_back(store->kind());
      break;
    }
    if (!slab.served.adopted) {
      std::string why;
      const bool vmm = options.sharing == DeviceSharing::kVmm ||
                       (options.sharing == DeviceSharing::kAuto && vmm_fd_supported(device, &why));
      if (vmm) {
        auto memory = SharedDeviceMemory::allocate(device, data_bytes, fmt::format("rank {}'s weights", rank));
        if (!memory.is_ok()) return with_memory_hint(memory.status());
        slab.memory = std::move(*memory);
        HEARTH_ASSIGN_OR_RETURN(slab.served.fd, slab.memory.export_fd());
        want.handle = std::string(kSlabHandleVmm);
      } else {
        if (!why.empty()) {
          HEARTH_LOG_WARN("rank {}: {}; using legacy CUDA IPC, so the device copy dies with this loader", rank, why);
        }
        auto memory = SharedDeviceMemory::allocate_legacy(device, data_bytes, fmt::format("rank {}'s weights", rank));
        if (!memory.is_ok()) return with_memory_hint(memory.status());
        slab.memory = std::move(*memory);
        want.handle = std::string(kSlabHandleCudaIpc);
      }
      HEARTH_RETURN_IF_ERROR(upload(host, data_bytes, slab.memory.data()));
      if (!vmm) {
        HEARTH_ASSIGN_OR_RETURN(want.ipc_handle, slab.memory.legacy_handle_hex());
      }
      want.bytes = slab.memory.bytes();
      slab.served.record = want;
    }
    if (slab.served.adopted) {
      const std::string name = slab_store_name(slab.served.record);
      for (auto& [k, store] : kept) {
        if (k.fd && k.name == name) {  // the same slab, kept by a second store too
          k.fd.reset();
          slab.served.held_by.emplace_back(store->kind());
        }
      }
    }
    slab.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    HEARTH_LOG_INFO("rank {}: {} {} slab on CUDA device {} ({}, sm_{}) in {:.3f} s{}", rank,
                    slab.served.adopted ? "adopted the" : "copied a", human_bytes(data_bytes), device, id.uuid,
                    id.compute_capability, slab.seconds,
                    slab.served.adopted ? ""
                                        : fmt::format(" ({:.1f} GB/s)", data_bytes / 1e9 / std::max(slab.seconds, 1e-9)));
    out->summary.push_back(boost::json::object{{"rank", rank},
                                               {"device", device},
                                               {"handle", slab.served.record.handle},
                                               {"adopted", slab.served.adopted},
                                               {"bytes", slab.served.record.bytes},
                                               {"seconds", slab.seconds}});
    out->slabs.push_back(std::move(slab));
  }
  // Kept slabs nobody adopted belong to another model or GPU: let them go.
  for (auto& [k, store] : kept) {
    if (!k.fd) continue;
    if (Status st = store->forget(k.name); !st.is_ok()) HEARTH_LOG_WARN("{}: {}", store->kind(), st.to_string());
    HEARTH_LOG_INFO("released the stale slab {} kept by {}", k.name, store->kind());
  }
  // Every store keeps every slab (one that gave it back keeps it already).
  for (Slab& slab : out->slabs) {
    if (slab.served.record.handle != kSlabHandleVmm) continue;
    const int rank = slab.served.record.rank;
    const std::string name = slab_store_name(slab.served.record);
    for (auto& store : stores) {
      auto& held = slab.served.held_by;
      if (std::find(held.begin(), held.end(), store->kind()) != held.end()) continue;
      if (Status st = store->keep(name, slab.served.fd.get()); st.is_ok()) {
        held.emplace_back(store->kind());
      } else {
        HEARTH_LOG_WARN("rank {}: {} does not keep the slab: {}", rank, store->kind(), st.to_string());
      }
    }
    if (slab.served.held_by.empty()) {
      HEARTH_LOG_WARN("rank {}: no fd store keeps the slab (neither systemd nor hearth serve), so a restarted "
                      "loader copies it again", rank);
    }
  }
  // The server owns the fds from here; the loader keeps the mappings.
  std::vector<ServedSlab> served;
  for (Slab& s : out->slabs) served.push_back(std::move(s.served));
  HEARTH_ASSIGN_OR_RETURN(out->server,
                          SlabServer::start(slab_socket_path(options.shm_dir, options.instance), std::move(served)));
  return std::unique_ptr<DeviceSlabs>(std::move(out));
}

#endif

}  // namespace hearth
