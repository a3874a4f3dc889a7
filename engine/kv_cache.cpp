#include "engine/kv_cache.h"

#include "common/check.h"

namespace hearth {

Result<KvDType> kv_dtype_from_name(std::string_view name) {
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    if (name == kernels::kv_dtype_name(t)) return t;
  }
  return make_error(ErrorCode::kInvalidArgument, "the KV cache dtype must be f32, f16 or bf16, not \"{}\"", name);
}

Result<KvCache> KvCache::create(Backend& backend, const KvCacheConfig& config) {
  if (config.n_layers <= 0 || config.kv_dim <= 0 || config.block_size <= 0 || config.n_blocks <= 0) {
    return make_error(ErrorCode::kInvalidArgument, "KV cache needs positive layers, kv_dim, block size and blocks");
  }
  const int32_t element = kernels::kv_dtype_bytes(config.dtype);
  if (element == 0) return make_error(ErrorCode::kInvalidArgument, "unknown KV cache dtype {}", static_cast<int>(config.dtype));
  KvCache cache;
  cache.config_ = config;
  cache.layer_bytes_ = static_cast<int64_t>(config.n_blocks) * config.block_size * config.kv_dim * element;
  const auto bytes = checked_mul(static_cast<uint64_t>(cache.layer_bytes_), config.n_layers);
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
  cache.blocks_ = BlockAllocator(config.n_blocks);
  return cache;
}

BlockAllocator::BlockAllocator(int32_t n_blocks) : total_(n_blocks) {
  free_.reserve(static_cast<size_t>(n_blocks));
  for (int32_t b = n_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> BlockAllocator::alloc() {
  if (free_.empty()) return std::nullopt;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void BlockAllocator::free(int32_t block) {
  HEARTH_CHECK(block >= 0 && block < total_) << "block " << block << " is not in the cache";
  HEARTH_CHECK(free_.size() < static_cast<size_t>(total_)) << "block " << block << " freed twice";
  free_.push_back(block);
}

Status kv_sequence_reserve(BlockAllocator& blocks, KvSequence& seq, int32_t positions, int32_t block_size) {
  const auto needed = static_cast<size_t>((positions + block_size - 1) / block_size);
  if (needed <= seq.blocks.size()) return Status::ok();
  if (needed - seq.blocks.size() > static_cast<size_t>(blocks.free_count())) {
    return make_error(ErrorCode::kResourceExhausted, "the KV cache has {} free blocks, {} more are needed",
                      blocks.free_count(), needed - seq.blocks.size());
  }
  while (seq.blocks.size() < needed) seq.blocks.push_back(*blocks.alloc());
  return Status::ok();
}

void kv_sequence_release(BlockAllocator& blocks, KvSequence& seq) {
  for (int32_t b : seq.blocks) blocks.free(b);
  seq.blocks.clear();
  seq.length = 0;
}

}  // namespace hearth
