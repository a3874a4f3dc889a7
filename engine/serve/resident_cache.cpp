#include "engine/serve/resident_cache.h"

#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/log.h"
#include "ipc/segment.h"

#if HEARTH_HAVE_CUDA
#include <cuda_runtime.h>

#include "engine/cuda/cuda_backend.h"
#include "ipc/device_memory.h"
#endif

namespace hearth {
namespace {

// "" for rank 0, whose lines have always named no rank; "rank R: " for the others.
std::string rank_prefix(int rank) { return rank == 0 ? std::string() : fmt::format("rank {}: ", rank); }

// Attention reads each sequence's K and V once per token, and an engine adopting the
// cache faults in every page of it: both go better on 2 MiB pages. One line for a new
// segment says where it landed.
void log_kv_pages(const std::string& who, const KvSegment& segment) {
  const uint64_t bytes = segment.header().prologue.total_bytes;
  const std::string why = segment.why_not_huge();
  if (why.empty()) {
    HEARTH_LOG_INFO("{}created the resident KV cache ({}{})", who, human_bytes(bytes),
                    segment.huge_bytes() > 0 ? ", on 2 MiB pages" : "");
  } else {
    HEARTH_LOG_INFO("{}created the resident KV cache ({}, {} of it on 2 MiB pages: {})", who, human_bytes(bytes),
                    human_bytes(segment.huge_bytes()), why);
  }
}

struct Kept {
  KeptFd fd;
  FdStore* store = nullptr;
};

// What `stores` keep for `instance`'s `rank`.
std::vector<Kept> kept_for(std::span<const std::unique_ptr<FdStore>> stores, std::string_view instance, int rank) {
  std::vector<Kept> out;
  for (const auto& store : stores) {
    auto got = store->kept(kv_store_prefix(instance, rank));
    if (!got.is_ok()) {
      HEARTH_LOG_WARN("{}cannot ask {} for the KV cache it keeps: {}", rank_prefix(rank), store->kind(),
                      got.status().to_string());
      continue;
    }
    for (KeptFd& k : *got) out.push_back({std::move(k), store.get()});
  }
  return out;
}

void forget(const Kept& k, int rank) {
  if (Status st = k.store->forget(k.fd.name); !st.is_ok()) {
    HEARTH_LOG_WARN("{}{} could not forget {}: {}", rank_prefix(rank), k.store->kind(), k.fd.name, st.to_string());
  }
}

// Lets go of the device memory this process held for the rank, in every store too (by
// name: systemd gives a kept fd back only once, so kept() no longer lists it).
void drop_held(RankCacheOptions& o, std::span<const std::unique_ptr<FdStore>> stores) {
  o.device_memory.reset();
  if (o.device_name.empty()) return;
  for (const auto& store : stores) forget({KeptFd{o.device_name, UniqueFd()}, store.get()}, o.rank);
  o.device_name.clear();
}

#if HEARTH_HAVE_CUDA

// K and V of `segment` (on_device) on CUDA device `device`: the allocation a store kept
// for the segment's id when the segment was adopted, else a new one (the segment renewed
// first when its tables described memory nobody kept) given to every store. Whatever else
// the stores keep for this rank is forgotten first, so that the GPU never holds two.
struct DeviceKv {
  std::shared_ptr<SharedDeviceMemory> memory;
  std::string name;
};

Result<DeviceKv> device_kv(int device, const std::string& uuid, KvSegment& segment, RankCacheOptions& o,
                           std::span<const std::unique_ptr<FdStore>> stores) {
  const std::string who = rank_prefix(o.rank);
  const KvGeometry& g = segment.header().geometry;
  KvDeviceRecord want{o.instance, o.rank, segment.adopted() ? segment.header().id : 0, kv_device_bytes(g), uuid};
  if (o.device_memory && !o.device_name.empty()) {  // this process's own, from the cache it opened before
    if (const std::vector<std::string> names{o.device_name}; kv_kept_choice(names, want).adopt) {
      return DeviceKv{std::static_pointer_cast<SharedDeviceMemory>(std::move(o.device_memory)), o.device_name};
    }
  }
  drop_held(o, stores);  // another segment's now, or lost by a failed open before
  std::vector<Kept> kept = kept_for(stores, o.instance, o.rank);
  std::vector<std::string> names;
  for (const Kept& k : kept) names.push_back(k.fd.name);
  const KvKeptChoice choice = kv_kept_choice(names, want);
  for (const size_t i : choice.forget) {
    forget(kept[i], o.rank);
    kept[i].fd.fd.reset();
  }
  std::optional<SharedDeviceMemory> memory;
  if (choice.adopt) {
    const Kept& k = kept[*choice.adopt];
    const uint64_t bytes = kv_store_record(k.fd.name)->bytes;
    auto imported = SharedDeviceMemory::import_fd(device, k.fd.fd.get(), bytes);
    if (imported.is_ok()) {
      HEARTH_LOG_INFO("{}K and V of the resident KV cache are the ones {} kept on GPU {} ({})", who, k.store->kind(),
                      uuid, human_bytes(bytes));
      memory = std::move(*imported);
    } else {
      HEARTH_LOG_WARN("{}the KV cache's device memory that {} kept cannot be mapped: {}", who, k.store->kind(),
                      imported.status().to_string());
      for (const Kept& same : kept) {
        if (same.fd.fd && same.fd.name == k.fd.name) forget(same, o.rank);
      }
    }
    for (Kept& same : kept) same.fd.fd.reset();
  }
  if (memory) return DeviceKv{std::make_shared<SharedDeviceMemory>(std::move(*memory)), names[*choice.adopt]};

  if (segment.adopted()) {
    segment.renew();
    HEARTH_LOG_WARN("{}the resident KV cache {} describes K and V on the GPU that no fd store kept (the store was "
                    "restarted, or the process holding it): its tables are voided and the requests in flight are "
                    "computed again",
                    who, segment.path().string());
  }
  HEARTH_ASSIGN_OR_RETURN(SharedDeviceMemory fresh, SharedDeviceMemory::allocate(device, want.bytes, "the KV cache"));
  // Zeroed: attention reads whole blocks, and a block's unwritten tail must not be NaN.
  if (cudaError_t e = cudaMemset(fresh.data(), 0, fresh.bytes()); e != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) {
    return make_error(ErrorCode::kInternal, "clearing the KV cache's device memory: {}", cudaGetErrorString(e));
  }
  HEARTH_ASSIGN_OR_RETURN(UniqueFd fd, fresh.export_fd());
  want.segment_id = segment.header().id;
  want.bytes = fresh.bytes();
  const std::string name = kv_store_name(want);
  std::string held;
  for (const auto& store : stores) {
    if (Status st = store->keep(name, fd.get()); st.is_ok()) {
      held += fmt::format("{}{}", held.empty() ? "" : " and ", store->kind());
    } else {
      HEARTH_LOG_WARN("{}{} did not keep the KV cache's device memory: {}", who, store->kind(), st.to_string());
    }
  }
  if (held.empty()) {
    HEARTH_LOG_WARN("{}no fd store kept the KV cache's device memory: it ends with this engine", who);
  } else {
    HEARTH_LOG_INFO("{}K and V of the resident KV cache on GPU {} ({}), kept by {}", who, uuid, human_bytes(want.bytes),
                    held);
  }
  return DeviceKv{std::make_shared<SharedDeviceMemory>(std::move(fresh)), name};
}
#endif

}  // namespace

void remove_rank_cache(const std::filesystem::path& path, std::string_view instance, int rank,
                       std::span<const std::unique_ptr<FdStore>> stores) {
  std::error_code ec;
  if (std::filesystem::remove(path, ec)) HEARTH_LOG_INFO("removed the resident KV segment {}", path.string());
  for (const Kept& k : kept_for(stores, instance, rank)) forget(k, rank);
}

Result<RankCache> open_rank_cache(Backend& backend, const KvCacheConfig& kv, RankCacheOptions options,
                                  std::span<const std::unique_ptr<FdStore>> stores) {
  const std::string who = rank_prefix(options.rank);
  const bool gpu = backend.name().starts_with("cuda");
  std::string why_private;
  if (!backend.name().starts_with("cpu") && !gpu) {
    why_private = fmt::format("keeping it across restarts needs a CPU or CUDA backend (this engine: {})", backend.name());
  }
#if HEARTH_HAVE_CUDA
  int device = 0;
  std::string uuid;
  if (gpu && options.adopt) {
    HEARTH_ASSIGN_OR_RETURN(device, cuda_device_from_name(backend.name()));
    HEARTH_ASSIGN_OR_RETURN(DeviceIdentity id, device_identity(device));
    uuid = id.uuid;
    std::string why;
    if (!vmm_fd_supported(device, &why)) {
      why_private = fmt::format("keeping it on the GPU across restarts needs device memory with POSIX fd handles ({})", why);
    } else if (stores.empty()) {
      why_private = "keeping it on the GPU across restarts needs an fd store to hold it (run the engine under "
                    "hearth serve --device, or as hearth-engine@.service, whose FileDescriptorStoreMax= allows it)";
    }
  }
#else
  if (gpu) why_private = "this build has no CUDA";
#endif
  if (!options.adopt || !why_private.empty()) {
    drop_held(options, stores);
    remove_rank_cache(options.path, options.instance, options.rank, stores);
    if (!why_private.empty()) HEARTH_LOG_INFO("{}the KV cache is private: {}", who, why_private);
    HEARTH_ASSIGN_OR_RETURN(KvCache made, KvCache::create(backend, kv));
    return RankCache{std::move(made), std::nullopt, nullptr};
  }
  KvSegmentConfig config;
  config.weights = options.weights;
  config.owner_id = options.owner_id;
  config.geometry = {kv.n_layers, kv.kv_dim, kv.block_size, kv.n_blocks, static_cast<uint32_t>(kv.dtype),
                     static_cast<uint32_t>(kernels::kv_dtype_bytes(kv.dtype)), options.rank, options.tp,
                     options.n_slots, options.max_blocks, gpu ? 1u : 0u};
  auto segment = KvSegment::open_or_create(options.path, config);
  if (!segment.is_ok()) {
    return segment.status().with_context(
        fmt::format("{}the resident KV cache (hearth-engine --no-kv-adopt keeps it private)", who));
  }
  if (segment->adopted()) {
    HEARTH_LOG_INFO("{}adopting the resident KV cache {} ({})", who, options.path.string(),
                    human_bytes(segment->header().prologue.total_bytes));
  } else {
    if (!segment->why_rebuilt().empty()) {
      HEARTH_LOG_WARN("{}rebuilt the resident KV cache {} from empty: {}", who, options.path.string(),
                      segment->why_rebuilt());
    }
    if (!gpu) log_kv_pages(who, *segment);
  }
  std::shared_ptr<void> device_memory;
  std::string device_name;
  void* k = segment->k();
  void* v = segment->v();
#if HEARTH_HAVE_CUDA
  if (gpu) {
    HEARTH_ASSIGN_OR_RETURN(DeviceKv d, device_kv(device, uuid, *segment, options, stores));
    k = d.memory->data();
    v = static_cast<std::byte*>(d.memory->data()) + kv_device_v_offset(segment->header().geometry);
    device_memory = std::move(d.memory);
    device_name = std::move(d.name);
  }
#endif
  HEARTH_ASSIGN_OR_RETURN(KvCache made, KvCache::wrap(kv, k, v));
  return RankCache{std::move(made), std::move(segment).value(), std::move(device_memory), std::move(device_name)};
}

}  // namespace hearth
