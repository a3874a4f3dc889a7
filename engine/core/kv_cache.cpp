#include "engine/core/kv_cache.h"

#include <algorithm>

#include "common/check.h"
#include "common/test_point.h"

namespace hearth {

Result<KvDType> kv_dtype_from_name(std::string_view name) {
  for (KvDType t : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    if (name == kernels::kv_dtype_name(t)) return t;
  }
  return make_error(ErrorCode::kInvalidArgument, "the KV cache dtype must be f32, f16 or bf16, not \"{}\"", name);
}

Result<KvCache> KvCache::wrap(const KvCacheConfig& config, void* k, void* v) {
  if (config.n_layers <= 0 || config.kv_dim <= 0 || config.block_size <= 0 || config.n_blocks <= 0 ||
      kernels::kv_dtype_bytes(config.dtype) == 0 || k == nullptr || v == nullptr) {
    return make_error(ErrorCode::kInvalidArgument, "a KV cache over given memory needs its geometry and both halves");
  }
  KvCache cache;
  cache.config_ = config;
  cache.layer_bytes_ = static_cast<int64_t>(config.n_blocks) * config.block_size * config.kv_dim *
                       kernels::kv_dtype_bytes(config.dtype);
  const auto bytes = static_cast<size_t>(cache.layer_bytes_) * static_cast<size_t>(config.n_layers);
  cache.k_ = BackendBuffer(k, bytes, nullptr);  // not owned: the segment's
  cache.v_ = BackendBuffer(v, bytes, nullptr);
  cache.blocks_ = BlockAllocator(config.n_blocks);
  return cache;
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

namespace {

// One 64-bit lane of the chain: a multiply-xorshift mix of the parent's lanes and every
// token (distinct constants per lane, so the two lanes are independent functions).
uint64_t mix(uint64_t h) {
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

uint64_t lane(uint64_t seed, const BlockKey& parent, std::span<const TokenId> tokens, uint64_t k) {
  uint64_t h = mix(seed ^ parent.hi) ^ mix(parent.lo + k);
  for (TokenId t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) * k + k));
  return mix(h ^ tokens.size());
}

}  // namespace

BlockKey block_key(const BlockKey& parent, std::span<const TokenId> tokens) {
  return {lane(0x243f6a8885a308d3ull, parent, tokens, 0x9e3779b97f4a7c15ull),
          lane(0x13198a2e03707344ull, parent, tokens, 0xc2b2ae3d27d4eb4full)};
}

BlockAllocator::BlockAllocator(int32_t n_blocks) : total_(n_blocks) {
  free_.reserve(static_cast<size_t>(n_blocks));
  free_at_.assign(static_cast<size_t>(n_blocks), -1);
  for (int32_t b = n_blocks - 1; b >= 0; --b) {
    free_at_[static_cast<size_t>(b)] = static_cast<int32_t>(free_.size());
    free_.push_back(b);
  }
  const auto n = static_cast<size_t>(n_blocks);
  refs_.assign(n, 0);
  key_of_.assign(n, {});
  published_.assign(n, 0);
  prev_.assign(n, -1);
  next_.assign(n, -1);
}

void BlockAllocator::unlink(int32_t b) {
  const auto i = static_cast<size_t>(b);
  (prev_[i] >= 0 ? next_[static_cast<size_t>(prev_[i])] : lru_head_) = next_[i];
  (next_[i] >= 0 ? prev_[static_cast<size_t>(next_[i])] : lru_tail_) = prev_[i];
  prev_[i] = next_[i] = -1;
  --lru_size_;
}

std::optional<int32_t> BlockAllocator::alloc() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
    free_at_[static_cast<size_t>(b)] = -1;
  } else if (lru_head_ >= 0) {  // evict the least recently used published block
    b = lru_head_;
    unlink(b);
    if (observer_ != nullptr) observer_->unpublished(b);
    by_key_.erase(key_of_[static_cast<size_t>(b)]);
    published_[static_cast<size_t>(b)] = 0;
  } else {
    return std::nullopt;
  }
  HEARTH_TEST_POINT("engine.kv.alloc");  // taken off its list, not yet held
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

bool BlockAllocator::take_free(int32_t block) {
  const int32_t at = free_at_[static_cast<size_t>(block)];
  if (at < 0) return false;
  const int32_t last = free_.back();  // moves into its place
  free_[static_cast<size_t>(at)] = last;
  free_at_[static_cast<size_t>(last)] = at;
  free_.pop_back();
  free_at_[static_cast<size_t>(block)] = -1;
  return true;
}

bool BlockAllocator::hold(int32_t block) {
  if (block < 0 || block >= total_) return false;
  const auto i = static_cast<size_t>(block);
  if (refs_[i] == 0) {
    if (published_[i]) {
      unlink(block);
    } else {
      if (!take_free(block)) return false;
    }
  }
  ++refs_[i];
  return true;
}

void BlockAllocator::free(int32_t block) {
  HEARTH_CHECK(block >= 0 && block < total_) << "block " << block << " is not in the cache";
  const auto i = static_cast<size_t>(block);
  HEARTH_CHECK(refs_[i] > 0) << "block " << block << " freed more often than it was taken";
  if (--refs_[i] > 0) return;
  if (!published_[i]) {
    free_at_[i] = static_cast<int32_t>(free_.size());
    free_.push_back(block);
    return;
  }
  prev_[i] = lru_tail_;  // most recently used: at the tail
  next_[i] = -1;
  (lru_tail_ >= 0 ? next_[static_cast<size_t>(lru_tail_)] : lru_head_) = block;
  lru_tail_ = block;
  ++lru_size_;
}

std::optional<int32_t> BlockAllocator::find(const BlockKey& key, std::span<const TokenId> tokens) {
  const auto it = by_key_.find(key);
  if (it == by_key_.end() || static_cast<int32_t>(tokens.size()) != block_size_) return std::nullopt;
  const int32_t b = it->second;
  const auto i = static_cast<size_t>(b);
  if (!std::equal(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(i * tokens.size()))) {
    return std::nullopt;  // a hash collision: never trusted
  }
  if (refs_[i]++ == 0) unlink(b);
  return b;
}

void BlockAllocator::publish(int32_t block, const BlockKey& key, std::span<const TokenId> tokens) {
  HEARTH_TEST_POINT("engine.prefix.insert");  // a filled block offered to the index, before it changes
  HEARTH_CHECK(block >= 0 && block < total_ && refs_[static_cast<size_t>(block)] > 0)
      << "block " << block << " is published by no holder";
  if (block_size_ == 0) {
    block_size_ = static_cast<int32_t>(tokens.size());
    tokens_.assign(static_cast<size_t>(total_) * tokens.size(), 0);
  }
  HEARTH_CHECK(static_cast<int32_t>(tokens.size()) == block_size_) << "a block of " << tokens.size() << " tokens";
  const auto i = static_cast<size_t>(block);
  if (published_[i] || !by_key_.emplace(key, block).second) return;
  published_[i] = 1;
  key_of_[i] = key;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(i * tokens.size()));
  if (observer_ != nullptr) observer_->published(block, key, tokens);
}

bool BlockAllocator::restore(int32_t block, const BlockKey& key, std::span<const TokenId> tokens) {
  if (block < 0 || block >= total_ || tokens.empty()) return false;
  const auto i = static_cast<size_t>(block);
  if (block_size_ == 0) {
    block_size_ = static_cast<int32_t>(tokens.size());
    tokens_.assign(static_cast<size_t>(total_) * tokens.size(), 0);
  }
  if (static_cast<int32_t>(tokens.size()) != block_size_ || published_[i]) return false;
  if (refs_[i] == 0) {
    if (free_at_[i] < 0) return false;
    if (!by_key_.emplace(key, block).second) return false;
    take_free(block);
    prev_[i] = lru_tail_;  // evictable, most recently used
    next_[i] = -1;
    (lru_tail_ >= 0 ? next_[static_cast<size_t>(lru_tail_)] : lru_head_) = block;
    lru_tail_ = block;
    ++lru_size_;
  } else if (!by_key_.emplace(key, block).second) {
    return false;
  }
  published_[i] = 1;
  key_of_[i] = key;
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<ptrdiff_t>(i * tokens.size()));
  return true;
}

Status BlockAllocator::audit() const {
  std::vector<int> seen(static_cast<size_t>(total_), 0);
  for (size_t k = 0; k < free_.size(); ++k) {
    if (free_at_[static_cast<size_t>(free_[k])] != static_cast<int32_t>(k)) {
      return make_error(ErrorCode::kInternal, "free block {} is not where the free list's index says", free_[k]);
    }
  }
  for (int32_t b : free_) {
    if (refs_[static_cast<size_t>(b)] != 0 || published_[static_cast<size_t>(b)]) {
      return make_error(ErrorCode::kInternal, "free block {} is held or published", b);
    }
    ++seen[static_cast<size_t>(b)];
  }
  size_t listed = 0;
  for (int32_t b = lru_head_; b >= 0; b = next_[static_cast<size_t>(b)]) {
    if (refs_[static_cast<size_t>(b)] != 0 || !published_[static_cast<size_t>(b)] || ++listed > lru_size_) {
      return make_error(ErrorCode::kInternal, "evictable block {} is held, unpublished or listed twice", b);
    }
    ++seen[static_cast<size_t>(b)];
  }
  for (int32_t b = 0; b < total_; ++b) {
    const int expected = refs_[static_cast<size_t>(b)] > 0 ? 0 : 1;
    if (seen[static_cast<size_t>(b)] != expected) {
      return make_error(ErrorCode::kInternal, "block {} with {} holders is free or evictable {} times", b,
                        refs_[static_cast<size_t>(b)], seen[static_cast<size_t>(b)]);
    }
  }
  for (const auto& [key, b] : by_key_) {
    if (!published_[static_cast<size_t>(b)] || !(key_of_[static_cast<size_t>(b)] == key)) {
      return make_error(ErrorCode::kInternal, "the key of block {} does not name it", b);
    }
  }
  if (by_key_.size() != static_cast<size_t>(std::count(published_.begin(), published_.end(), 1))) {
    return make_error(ErrorCode::kInternal, "{} keys for {} published blocks", by_key_.size(),
                      std::count(published_.begin(), published_.end(), 1));
  }
  return Status::ok();
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

void kv_sequence_trim(BlockAllocator& blocks, KvSequence& seq, int32_t block_size) {
  const auto needed = static_cast<size_t>((seq.length + block_size - 1) / block_size);
  while (seq.blocks.size() > needed) {
    blocks.free(seq.blocks.back());
    seq.blocks.pop_back();
  }
}

void kv_sequence_release(BlockAllocator& blocks, KvSequence& seq) {
  // Last block first: published ones become evictable tail first, so eviction takes a
  // chain from its end and its head (the most shared part) stays findable longest.
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) blocks.free(*b);
  seq.blocks.clear();
  seq.length = 0;
}

}  // namespace hearth
