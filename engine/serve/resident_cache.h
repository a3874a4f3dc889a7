// Where an engine rank keeps its share of the KV cache: in its resident KV segment
// (ipc/kv_segment.h) when the cache can outlive the process, so that a restarted engine
// adopts it; else in private memory (and any segment or kept device memory of the rank's
// is removed, so nothing stale is adopted later).
//
// - CPU backends: K and V in the segment itself (shared memory).
// - CUDA backends: the segment holds the bookkeeping, K and V a VMM allocation whose fd
//   the rank gives to every fd store it has (hearth serve's holder, systemd's fd store),
//   named after the segment's id; a restarted rank maps it again. The cache is private
//   where the GPU lacks POSIX fd handles or no store is there to keep the fd.
// - --no-kv-adopt: private.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/status.h"
#include "engine/core/backend.h"
#include "engine/core/kv_cache.h"
#include "ipc/fd_store.h"
#include "ipc/kv_segment.h"

namespace hearth {

struct RankCacheOptions {
  std::filesystem::path path;  // the rank's KV segment
  std::string instance;
  int rank = 0;
  int tp = 1;
  bool adopt = true;           // false: --no-kv-adopt
  Fingerprint weights;
  uint64_t owner_id = 0;       // KvSegmentConfig::owner_id: rank 0's broker, 0 for other ranks
  // Block tables: rank 0 keeps one per broker slot; other ranks keep none (rank 0's steps
  // name their blocks), so 1.
  uint32_t n_slots = 1;
  int32_t max_blocks = 1;      // per table
  // The device memory this process already holds for the rank (a rank that opens its
  // cache again in the same process: systemd gives a kept fd back only once), and its
  // name in the stores; used again when it is the one the segment describes.
  std::shared_ptr<void> device_memory;
  std::string device_name;
};

struct RankCache {
  KvCache cache;
  std::optional<KvSegment> segment;     // none: a private cache
  std::shared_ptr<void> device_memory;  // K and V on the GPU, while the cache uses them
  std::string device_name;              // its name in the fd stores
};

// `stores`: the process's fd stores (fd_stores_from_environment, made once), used by
// CUDA backends only.
Result<RankCache> open_rank_cache(Backend& backend, const KvCacheConfig& kv, RankCacheOptions options,
                                  std::span<const std::unique_ptr<FdStore>> stores);

// Removes the resident KV segment at `path` and forgets the device memory `stores` keep
// for `instance`'s `rank` (a rank a group no longer has, or a cache made private).
void remove_rank_cache(const std::filesystem::path& path, std::string_view instance, int rank,
                       std::span<const std::unique_ptr<FdStore>> stores);

}  // namespace hearth
