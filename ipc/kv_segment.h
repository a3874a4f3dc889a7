// The resident KV segment, hearth.<instance>.kv: the engine's paged KV cache in shared
// memory, so that a restarted engine adopts what its predecessor computed instead of
// prefilling every request again (DESIGN.md, "kv"). With tensor parallelism rank 0's
// segment is that one and each other rank r keeps its share of K and V in
// hearth.<instance>.kv-rank<r> (its tables unused: rank 0's describe every rank's blocks).
//
// Layout: a header (the model's fingerprint, the broker it serves, the cache's geometry
// and dtype, TP rank), then a table per broker slot, then K and V (each n_layers x
// n_blocks x block_size x kv_dim elements, page aligned), on 2 MiB pages where the kernel
// gives them (ShmSegment::create), so that an adopter maps the whole cache with one fault
// per 2 MiB rather than 512, however long its contexts. On a GPU K and V live in device
// memory instead (KvGeometry::on_device): a VMM allocation whose fd an fd store
// (ipc/fd_store.h) keeps under a name carrying the segment's id (kv_store_name), so that
// it outlives the engine as the file does; the segment then holds only the bookkeeping. A slot's table names the
// request it describes (the broker slot's request id and generation), its blocks in
// position order and `committed`: the positions whose K/V are fully written. The one
// writer (the engine) advances `committed` with release ordering only after the step that
// wrote those positions, and sets it to 0 before any of the sequence's blocks can go to
// another sequence; a reader trusts nothing past it. The check is the last sampled row's
// top token and its logit, so that an adopter can recompute that row from the adopted
// cache and compare before it trusts the rest.
//
// Knows nothing of models or backends: only bytes and their bookkeeping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "ipc/segment.h"
#include "ipc/segment_prologue.h"
#include "ipc/weights_layout.h"

namespace hearth {

inline constexpr uint64_t kKvMagic = 0x474553564b525448ull;  // "HTRKVSEG" little-endian
// 4: the same layout as 3, on huge pages; a segment from before is rebuilt once, not
// adopted on 4 KiB pages forever.
inline constexpr uint32_t kKvLayoutVersion = 4;
inline constexpr uint32_t kKvHeaderBytes = 4096;
inline constexpr SegmentKind kKvSegment{"KV", kKvMagic, kKvLayoutVersion, kKvHeaderBytes,
                                       "restart hearth-engine from this build"};
// How long a new segment may spend placing K and V in huge pages (HugePagePlan): on bare
// metal a few GiB take a fraction of it, but memory that a hypervisor must supply afresh
// took 3-4 s per GiB where 4 KiB pages took 0.25 s, and an engine's start must not wait
// on that. Whatever is not placed by then is on 4 KiB pages.
inline constexpr std::chrono::milliseconds kKvHugePageBudget{1000};

// What a KV segment must match to be adopted; anything else rebuilds it.
struct KvGeometry {
  int32_t n_layers = 0;
  int32_t kv_dim = 0;  // this rank's share
  int32_t block_size = 0;
  int32_t n_blocks = 0;
  uint32_t dtype = 0;       // kernels::KvDType
  uint32_t element_bytes = 0;
  int32_t tp_rank = 0;
  int32_t tp_size = 1;
  uint32_t n_slots = 0;         // broker slots, one table each
  int32_t max_blocks = 0;       // per table: the context's blocks
  uint32_t on_device = 0;       // 1: K and V are in device memory (kv_device_bytes), not in the segment
  bool operator==(const KvGeometry&) const = default;
};

struct KvSegmentConfig {
  Fingerprint weights;
  // Rank 0's: the broker the tables' slots belong to (its creation time and nonce): a new
  // broker means new requests, and every table is void. Other ranks (whose segments hold
  // only K and V, the tables being rank 0's): 0.
  uint64_t owner_id = 0;
  KvGeometry geometry;
};

struct KvHeader {
  SegmentPrologue prologue;  // ipc/segment_prologue.h
  Fingerprint weights;
  uint64_t owner_id;
  KvGeometry geometry;
  int32_t creator_pid;
  uint32_t reserved0;
  uint64_t created_unix_ms;
  uint64_t tables_offset;
  uint64_t table_stride;
  uint64_t k_offset;
  uint64_t v_offset;
  uint64_t layer_bytes;            // of K (and of V) per layer
  std::atomic<uint64_t> adoptions;  // engines that adopted this segment
  uint64_t chain_seed[2];           // the prefix cache's key chain seed (random at creation)
  uint64_t records_offset;          // the prefix cache's index: a KvBlockRecord per block
  uint64_t record_stride;
  uint64_t id;  // random at creation, never 0 (a segment cut before it was written is refused)
  // Rank 0's, with tensor parallelism: the ids of the other ranks' segments its tables
  // were written with (0: none yet). A rank whose segment is another now (rebuilt, or a
  // private cache) did not keep what the tables describe.
  std::atomic<uint64_t> rank_ids[kMaxTensorParallel];
};
static_assert(sizeof(KvHeader) <= kKvHeaderBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free);

// The check packed in one word, so that a reader sees a position and its token together.
inline uint64_t kv_check_pack(int32_t pos, int32_t token) {
  return (uint64_t{static_cast<uint32_t>(pos)} << 32) | static_cast<uint32_t>(token);
}
inline int32_t kv_check_pos(uint64_t packed) { return static_cast<int32_t>(packed >> 32); }
inline int32_t kv_check_token(uint64_t packed) { return static_cast<int32_t>(packed & 0xffffffffu); }

struct alignas(64) KvSlotTable {
  std::atomic<int32_t> committed;   // positions whose K/V are written; 0: nothing is trusted
  uint32_t generation;              // the broker slot's generation and request id it is for
  uint64_t request_id;
  std::atomic<uint64_t> check;      // kv_check_pack(position of the last sampled row, its top token); 0: none
  float check_logit;                // that row's logit of the top token (written before `check`)
  int32_t n_blocks;                 // entries of blocks[] written
  // int32_t blocks[max_blocks] follow.
  int32_t* blocks() { return reinterpret_cast<int32_t*>(this + 1); }
  const int32_t* blocks() const { return reinterpret_cast<const int32_t*>(this + 1); }
};

// The prefix cache's index, one record per block: the block's key and tokens, valid while
// `published` is 1. Written (key, tokens, then `published` with release) only once the
// block's K/V are complete; `published` goes to 0 before the block is given to anyone to
// write again.
struct alignas(8) KvBlockRecord {
  std::atomic<uint32_t> published;
  uint32_t reserved;
  uint64_t key[2];
  // int32_t tokens[block_size] follow.
  int32_t* tokens() { return reinterpret_cast<int32_t*>(this + 1); }
  const int32_t* tokens() const { return reinterpret_cast<const int32_t*>(this + 1); }
};

uint64_t kv_segment_bytes(const KvGeometry& g);
// On a GPU (on_device): the device allocation's bytes, K at offset 0 and V at
// kv_device_v_offset.
uint64_t kv_device_bytes(const KvGeometry& g);
uint64_t kv_device_v_offset(const KvGeometry& g);

// A resident KV cache's device memory as an fd store keeps it: the instance and rank it
// is for, the id of the segment whose tables describe it, the allocation's size and the
// GPU. The name is "hearth-kv.<instance>.<rank>.<id, 16 hex digits>.<bytes>.<GPU uuid>".
struct KvDeviceRecord {
  std::string instance;
  int rank = 0;
  uint64_t segment_id = 0;
  uint64_t bytes = 0;
  std::string device_uuid;
  bool operator==(const KvDeviceRecord&) const = default;
};
inline constexpr std::string_view kKvStorePrefix = "hearth-kv.";
std::string kv_store_name(const KvDeviceRecord& r);
// kFormat for a name that is not one kv_store_name writes.
Result<KvDeviceRecord> kv_store_record(std::string_view name);
// The names fd stores list that an instance's rank should look at (kept() takes it).
std::string kv_store_prefix(std::string_view instance, int rank);

// What a rank does with the device memory fd stores keep for it (`names`, in any order):
// adopt the one kept for `want` (same instance, rank, segment id and GPU, at least
// want.bytes), if any, and forget every other one of its instance and rank (stale: its
// segment was rebuilt, or the cache resized or moved). Names of other instances or ranks,
// and names that are not KV records, are left alone.
struct KvKeptChoice {
  std::optional<size_t> adopt;  // index into names
  std::vector<size_t> forget;
};
KvKeptChoice kv_kept_choice(std::span<const std::string> names, const KvDeviceRecord& want);

class KvSegment {
 public:
  // Attaches to `path` when it holds a segment for exactly this config (then adopted() is
  // true), else replaces it with an empty one; `why_rebuilt()` says why, in a phrase, when
  // there was a segment that could not be adopted.
  static Result<KvSegment> open_or_create(const std::filesystem::path& path, const KvSegmentConfig& config);
  // Maps an existing segment for reading (hearth status, tests) after checking its header.
  static Result<KvSegment> attach(const std::filesystem::path& path, bool writable = false);

  KvHeader& header() const { return *reinterpret_cast<KvHeader*>(segment_.data()); }
  KvSlotTable& table(uint32_t slot) const {
    return *reinterpret_cast<KvSlotTable*>(segment_.data() + header().tables_offset + header().table_stride * slot);
  }
  KvBlockRecord& record(int32_t block) const {
    return *reinterpret_cast<KvBlockRecord*>(segment_.data() + header().records_offset +
                                             header().record_stride * static_cast<uint64_t>(block));
  }
  // K and V in the segment; nullptr when they are in device memory (on_device).
  std::byte* k() const { return header().geometry.on_device ? nullptr : segment_.data() + header().k_offset; }
  std::byte* v() const { return header().geometry.on_device ? nullptr : segment_.data() + header().v_offset; }
  bool adopted() const { return adopted_; }
  // How much of a segment this process created is on 2 MiB pages, and why not all of it
  // (ShmSegment::huge_bytes, why_not_huge); not measured for an adopted one.
  uint64_t huge_bytes() const { return segment_.huge_bytes(); }
  std::string why_not_huge() const { return segment_.why_not_huge(); }
  const std::string& why_rebuilt() const { return why_rebuilt_; }
  const std::filesystem::path& path() const { return segment_.path(); }

  // Voids every table and block record (after a group break, or an adopted cache found wrong).
  void clear_tables() const;
  void clear_records() const;
  // Makes an adopted segment a new, empty one in place: tables, records and the ranks'
  // ids voided, then a new id (so nothing kept under the old one is taken for it). For a
  // segment whose K and V are lost (its device memory was not kept).
  void renew();

 private:
  Status validate(uint64_t file_bytes) const;

  ShmSegment segment_;
  bool adopted_ = false;
  std::string why_rebuilt_;
};

}  // namespace hearth
