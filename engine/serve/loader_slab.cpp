#include "engine/serve/loader_slab.h"

#include "common/log.h"
#include "ipc/slab_channel.h"

#if HEARTH_HAVE_CUDA
#include <memory>

#include "engine/cuda/cuda_backend.h"
#include "ipc/device_memory.h"
#endif

namespace hearth {

Status backend_use_loader_slab(Backend& backend, const AttachedWeights& weights, int rank,
                               const std::filesystem::path& shm_dir, std::string_view instance) {
  if (!backend.name().starts_with("cuda")) return Status::ok();
#if !HEARTH_HAVE_CUDA
  (void)weights, (void)rank, (void)shm_dir, (void)instance;
  return Status::ok();
#else
  const std::filesystem::path path = slab_socket_path(shm_dir, instance);
  HEARTH_ASSIGN_OR_RETURN(auto fetched, slab_fetch(path, rank));
  if (!fetched) {
    HEARTH_LOG_INFO("no loader serves device slabs at {}: {} copies the weights itself (hearth-loader --device cuda "
                    "keeps them resident on the GPU across engine restarts)", path.string(), backend.name());
    return Status::ok();
  }
  const SlabRecord& r = fetched->record;
  const WeightsHeader& h = *weights.header;
  if (!(r.weights == h.fingerprint)) {
    return make_error(ErrorCode::kFormat, "the loader's device slab for rank {} is of weights {}, the segment holds {}: "
                      "the loader was restarted with another model; restart it once more", rank, r.weights.hex(),
                      h.fingerprint.hex());
  }
  if (r.data_bytes != h.rank_bytes[rank]) {
    return make_error(ErrorCode::kFormat, "the loader's device slab for rank {} holds {} bytes, the rank's weights are {}",
                      rank, r.data_bytes, h.rank_bytes[rank]);
  }
  HEARTH_ASSIGN_OR_RETURN(int device, cuda_device_from_name(backend.name()));
  HEARTH_ASSIGN_OR_RETURN(DeviceIdentity id, device_identity(device));
  if (id.uuid != r.device_uuid || id.compute_capability != r.compute_capability) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the loader keeps rank {}'s weights on GPU {} (its device {}, sm_{}), and this engine runs on {} "
                      "({}, sm_{}): start the engine with --backend cuda:N for that GPU, or the loader with "
                      "--device listing this one", rank, r.device_uuid, r.device, r.compute_capability, backend.name(),
                      id.uuid, id.compute_capability);
  }
  auto memory = r.handle == kSlabHandleVmm ? SharedDeviceMemory::import_fd(device, fetched->fd.get(), r.bytes)
                                           : SharedDeviceMemory::import_legacy(device, r.ipc_handle, r.bytes);
  if (!memory.is_ok()) return memory.status().with_context(fmt::format("rank {}'s device slab", rank));
  const std::span<const std::byte> host(weights.segment.data() + h.rank_offset[rank], h.rank_bytes[rank]);
  HEARTH_RETURN_IF_ERROR(cuda_backend_use_slab(
      backend, std::make_shared<const SharedDeviceMemory>(std::move(*memory)), host));
  HEARTH_LOG_INFO("rank {}: weights from the loader's {} slab on {} ({})", rank, r.handle, backend.name(),
                  human_bytes(r.data_bytes));
  return Status::ok();
#endif
}

}  // namespace hearth
