// KvCache: the paged key/value cache of one engine, and the block allocator over it.
//
// Memory is `n_blocks` fixed-size blocks per layer, each holding `block_size` token
// positions of K and V (n_layers x n_blocks x block_size x kv_dim elements of the cache's
// dtype: f32, f16 or bf16; one buffer each for K and V, owned by the backend; within a layer the layouts of
// kernels/attention_params.h: keys transposed per block and KV head). A sequence owns a
// list of blocks (its block table); position p lives in block table[p / block_size] at
// offset p % block_size.
// Not thread-safe: owned by the engine's step loop.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"
#include "common/token.h"
#include "engine/core/backend.h"
#include "kernels/attention_params.h"

namespace hearth {

// A full block's content key: a hash chain over the tokens of the block and of every
// block before it (key_i = H(key_{i-1}, tokens of block i), key_{-1} the chain's seed).
struct BlockKey {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const BlockKey&) const = default;
};
// The key of a block holding `tokens` after the block keyed `parent`.
BlockKey block_key(const BlockKey& parent, std::span<const TokenId> tokens);

// Told when the prefix cache's index changes (the resident KV segment mirrors it, so that
// a restarted engine finds the blocks again). `unpublished` comes before the block can be
// written by anyone.
class BlockObserver {
 public:
  virtual ~BlockObserver() = default;
  virtual void published(int32_t block, const BlockKey& key, std::span<const TokenId> tokens) = 0;
  virtual void unpublished(int32_t block) = 0;
};

// The cache's blocks: who holds each (a reference count) and, for the prefix cache,
// which full blocks hold known content. A block whose last holder lets go while it is
// published stays findable by its key (evictable, least recently used first) until
// alloc needs it; a block without content goes back to the free list. Not thread-safe.
class BlockAllocator {
 public:
  explicit BlockAllocator(int32_t n_blocks = 0);
  // Takes a block with one holder: a free one (recently freed first: they are warm),
  // else the least recently used evictable one, whose content is forgotten; nullopt
  // when every block is held.
  std::optional<int32_t> alloc();
  // Takes `block` as one more holder, wherever it is (free, evictable or held): how an
  // adopted sequence's blocks are held again after a restart. False for a block outside
  // the cache.
  bool hold(int32_t block);
  // Drops one holder of `block`.
  void free(int32_t block);
  // Blocks alloc can still give: free plus evictable.
  int32_t free_count() const { return static_cast<int32_t>(free_.size() + lru_size_); }
  int32_t total() const { return total_; }

  // The prefix cache. find: the block published under `key` whose tokens are `tokens`,
  // taken as one more holder; nullopt when none is. publish: `block` (held, full) holds
  // `tokens` under `key`; a key already published keeps its block (this one stays
  // private and is freed as usual).
  std::optional<int32_t> find(const BlockKey& key, std::span<const TokenId> tokens);
  void publish(int32_t block, const BlockKey& key, std::span<const TokenId> tokens);
  // Publishes `block` again after a restart (its content known from the resident index):
  // held or not, it becomes findable under `key`; one that nobody holds becomes
  // evictable. False (and no change) for a block outside the cache, a block already
  // published, or a key already taken.
  bool restore(int32_t block, const BlockKey& key, std::span<const TokenId> tokens);
  void set_observer(BlockObserver* observer) { observer_ = observer; }
  int32_t published_count() const { return static_cast<int32_t>(by_key_.size()); }
  int32_t holders(int32_t block) const { return refs_[static_cast<size_t>(block)]; }

  // Checks the bookkeeping (tests and debugging): every block exactly once in free,
  // evictable or held; every key's block publishing it. kInternal naming the first fault.
  Status audit() const;

 private:
  struct KeyHash {
    size_t operator()(const BlockKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull)); }
  };
  void unlink(int32_t block);  // out of the evictable list

  int32_t total_ = 0;
  bool take_free(int32_t block);  // out of the free list, in O(1); false when it is not there
  std::vector<int32_t> free_;     // no holder, no content
  std::vector<int32_t> free_at_;  // each block's index in free_, -1 when not there
  std::vector<int32_t> refs_;  // holders per block
  // Published blocks: key, tokens (block_size_ each) and the evictable list (held by
  // nobody, least recently used at the head), as links per block; -1 ends the list.
  std::unordered_map<BlockKey, int32_t, KeyHash> by_key_;
  std::vector<BlockKey> key_of_;
  std::vector<uint8_t> published_;
  std::vector<TokenId> tokens_;
  int32_t block_size_ = 0;
  std::vector<int32_t> prev_, next_;
  int32_t lru_head_ = -1, lru_tail_ = -1;
  size_t lru_size_ = 0;
  BlockObserver* observer_ = nullptr;
};

using kernels::KvDType;

// "f32", "f16", "bf16" -> the dtype; kInvalidArgument naming the choices otherwise.
Result<KvDType> kv_dtype_from_name(std::string_view name);

struct KvCacheConfig {
  int32_t n_layers = 0;
  int32_t kv_dim = 0;
  int32_t block_size = 16;
  int32_t n_blocks = 0;
  KvDType dtype = KvDType::kF32;  // what each K and V element is stored as
};

class KvCache {
 public:
  // Allocates the whole cache up front; fails with the size it wanted when memory is short.
  static Result<KvCache> create(Backend& backend, const KvCacheConfig& config);
  // A cache over memory someone else owns (the resident KV segment, on a host-memory
  // backend): n_layers * n_blocks * block_size * kv_dim elements of the dtype each.
  static Result<KvCache> wrap(const KvCacheConfig& config, void* k, void* v);

  const KvCacheConfig& config() const { return config_; }
  // Layer `layer` of the cache: n_blocks * block_size * kv_dim elements of config().dtype each.
  void* k(int32_t layer) const { return static_cast<std::byte*>(k_.data()) + layer_bytes_ * layer; }
  void* v(int32_t layer) const { return static_cast<std::byte*>(v_.data()) + layer_bytes_ * layer; }
  // Bytes of K and V together.
  uint64_t bytes() const { return 2 * static_cast<uint64_t>(layer_bytes_) * static_cast<uint64_t>(config_.n_layers); }

  // The cache's blocks: taken by sequences, returned when they finish.
  BlockAllocator& blocks() { return blocks_; }
  std::optional<int32_t> block_alloc() { return blocks_.alloc(); }
  void block_free(int32_t block) { blocks_.free(block); }
  int32_t blocks_free() const { return blocks_.free_count(); }

 private:
  KvCache() = default;

  KvCacheConfig config_;
  int64_t layer_bytes_ = 0;
  BackendBuffer k_;
  BackendBuffer v_;
  BlockAllocator blocks_;
};

// The blocks one sequence holds and how many positions are filled.
struct KvSequence {
  std::vector<int32_t> blocks;
  int32_t length = 0;

  // Cache slot (block * block_size + offset) of position `pos`.
  int32_t slot(int32_t pos, int32_t block_size) const {
    return blocks[static_cast<size_t>(pos / block_size)] * block_size + pos % block_size;
  }
};

// Makes sure `seq` has blocks for `positions` positions; kResourceExhausted (and no
// change) when too few blocks are free.
Status kv_sequence_reserve(BlockAllocator& blocks, KvSequence& seq, int32_t positions, int32_t block_size);
inline Status kv_sequence_reserve(KvCache& cache, KvSequence& seq, int32_t positions) {
  return kv_sequence_reserve(cache.blocks(), seq, positions, cache.config().block_size);
}
// Returns the blocks past those holding its `length` positions (the last first): what a
// sequence reserved for positions it then did not keep.
void kv_sequence_trim(BlockAllocator& blocks, KvSequence& seq, int32_t block_size);
// Returns all of the sequence's blocks (the last first) and empties it.
void kv_sequence_release(BlockAllocator& blocks, KvSequence& seq);
inline void kv_sequence_release(KvCache& cache, KvSequence& seq) { kv_sequence_release(cache.blocks(), seq); }

}  // namespace hearth
