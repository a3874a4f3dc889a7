#include "engine/kv_cache.h"

#include "common/check.h"

namespace hearth {

Result<KvCache> KvCache::create(Backend& backend, const KvCacheConfig& config) {
  if (config.n_layers <= 0 || config.kv_dim <= 0 || config.block_size <= 0 || config.n_blocks <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "KV cache needs positive layers, kv_dim, block size and blocks");
  }
  KvCache cache;
  cache.config_ = config;
  cache.layer_stride_ = static_cast<int64_t>(config.n_blocks) * config.block_size * config.kv_dim;
  const auto bytes = checked_mul(static_cast<uint64_t>(cache.layer_stride_) * sizeof(float), config.n_layers);
  if (!bytes || *bytes > (uint64_t{1} << 46)) {
    return make_error(ErrorCode::kInvalidArgument, "KV cache of {} blocks is too large", config.n_blocks);
  }
  auto k = backend.alloc(*bytes);
  auto v = k.is_ok() ? backend.alloc(*bytes) : Result<BackendBuffer>(k.status());
  if (!v.is_ok()) {
    return make_error(ErrorCode::kResourceExhausted,
                      "cannot allocate the KV cache ({} blocks of {} tokens, {} MiB): lower the context or the "
                      "number of KV blocks",
                      config.n_blocks, config.block_size, (2 * *bytes) >> 20);
  }
  cache.k_ = std::move(k).value();
  cache.v_ = std::move(v).value();
  cache.free_.reserve(static_cast<size_t>(config.n_blocks));
  for (int32_t b = config.n_blocks - 1; b >= 0; --b) cache.free_.push_back(b);
  return cache;
}

std::optional<int32_t> KvCache::block_alloc() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void KvCache::block_free(int32_t block) {
  HEARTH_CHECK(block >= 0 && block < config_.n_blocks) << "block " << block << " is not in the cache";
  HEARTH_CHECK(free_.size() < static_cast<size_t>(config_.n_blocks)) << "block " << block << " freed twice";
  free_.push_back(block);
}

Status kv_sequence_reserve(KvCache& cache, KvSequence& seq, int32_t positions) {
  const int32_t bs = cache.config().block_size;
  const auto needed = static_cast<size_t>((positions + bs - 1) / bs);
  if (needed <= seq.blocks.size()) return Status::ok();
  if (needed - seq.blocks.size() > static_cast<size_t>(cache.blocks_free())) {
    return make_error(ErrorCode::kResourceExhausted, "the KV cache has {} free blocks, {} more are needed",
                      cache.blocks_free(), needed - seq.blocks.size());
  }
  while (seq.blocks.size() < needed) seq.blocks.push_back(*cache.block_alloc());
  return Status::ok();
}

void kv_sequence_release(KvCache& cache, KvSequence& seq) {
  for (int32_t b : seq.blocks) cache.block_free(b);
  seq.blocks.clear();
  seq.length = 0;
}

}  // namespace hearth
