// The instance's resident LoRA adapters: hearth.<instance>.lora, a segment of fixed
// capacity the loader creates beside the weights (hearth-loader --max-loras,
// --max-lora-rank), which outlives engines and frontends like the weights do.
//
//   [LoraHeader, 64 KiB: the base's fingerprint, the capacity, one LoraSlotHeader per slot]
//   [slot 0's data] ... [slot n-1's data]      each slot_bytes long
//   a slot's data: per adapted matrix a LoraRecord, then A [rank, cols] and B [rows, rank]
//   in float32 (whole matrices: each engine rank takes its share)
//
// A slot's life: FREE -> WRITING (a writer fills it) -> READY (requests may name it by its
// id) -> UNLOADING (no new request names it; the engine frees the slot once no request in
// the broker or its batch names it) -> FREE. Writers (the loader's --lora at start, a frontend's
// POST /v1/load_lora_adapter) hold an flock on the file, which the kernel lets go of when
// a writer dies, so a slot left WRITING by a dead writer is free again for the next one.
// Every load gives its slot a new random id, and a request carries the id it was given
// (RequestSpec::adapter_id): an engine never runs a request with an adapter loaded after
// it into the same slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/lora.h"
#include "common/status.h"
#include "ipc/segment.h"
#include "ipc/segment_prologue.h"
#include "ipc/weights_layout.h"

namespace hearth {

inline constexpr uint64_t kLoraMagic = 0x41524f4c52525448ull;  // "HTRRLORA" little-endian
inline constexpr uint32_t kLoraLayoutVersion = 2;  // 2: nonce
inline constexpr uint32_t kLoraHeaderBytes = 65536;
inline constexpr SegmentKind kLoraSegment{"LoRA adapter", kLoraMagic, kLoraLayoutVersion, kLoraHeaderBytes,
                                          "restart hearth-loader from this build"};
inline constexpr size_t kLoraNameBytes = 64;     // a name is 1..63 bytes
inline constexpr size_t kLoraSourceBytes = 512;  // where it was read from (informational)

enum class LoraSlotState : uint32_t { kFree = 0, kWriting = 1, kReady = 2, kUnloading = 3 };
std::string_view lora_slot_state_name(uint32_t state);

struct alignas(64) LoraSlotHeader {
  std::atomic<uint32_t> state;     // LoraSlotState
  int32_t max_rank;                // the largest rank of its matrices
  std::atomic<uint64_t> id;        // the load's random id (nonzero), written before READY
  uint64_t loaded_unix_ms;
  uint64_t data_bytes;             // of slot_bytes, what its records take
  uint32_t n_matrices;
  uint32_t reserved;
  char name[kLoraNameBytes];       // NUL-terminated
  char source[kLoraSourceBytes];   // NUL-terminated
};

struct LoraHeader {
  SegmentPrologue prologue;  // ipc/segment_prologue.h
  Fingerprint base;          // the weights segment's fingerprint: the model the adapters adapt
  uint64_t nonce;            // random at creation: tells this segment from one that replaced it
  uint32_t n_slots;
  int32_t max_rank;
  uint64_t slot_bytes;
  uint64_t slots_offset;
  uint64_t created_unix_ms;
  LoraSlotHeader slots[kMaxLoraSlots];
};
static_assert(sizeof(LoraHeader) <= kLoraHeaderBytes);
static_assert(std::is_standard_layout_v<LoraHeader>);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct LoraRecord {
  int32_t layer;
  uint32_t target;  // LoraTarget
  int32_t rank;
  float scale;
  int64_t rows, cols;
};
static_assert(sizeof(LoraRecord) == 32);

// The bytes one matrix of `rank` takes in a slot (record and factors, 64-byte aligned).
uint64_t lora_record_bytes(int64_t rank, int64_t rows, int64_t cols);

// Adapter names: 1..63 printable ASCII bytes without spaces, quotes, backslashes, '=' or ','.
Status lora_name_check(std::string_view name);

// A READY (or UNLOADING) adapter, as the frontend lists it.
struct LoraSlotInfo {
  uint32_t slot = 0;
  uint64_t id = 0;
  std::string name;
  std::string source;
  int32_t max_rank = 0;
  uint32_t n_matrices = 0;
  uint64_t loaded_unix_ms = 0;
  bool unloading = false;
};

struct LoraSegmentConfig {
  Fingerprint base;
  uint32_t n_slots = 0;   // 1..kMaxLoraSlots
  int32_t max_rank = 0;
  uint64_t slot_bytes = 0;
};

class LoraSegment {
 public:
  // Creates the segment at `path` (replacing a file that is there), all slots FREE.
  static Result<LoraSegment> create(const std::filesystem::path& path, const LoraSegmentConfig& config);
  // Maps an existing one, refusing a stale or malformed file. Writers attach writable.
  static Result<LoraSegment> attach(const std::filesystem::path& path, bool writable);

  LoraSegment() = default;
  LoraSegment(LoraSegment&&) noexcept = default;
  LoraSegment& operator=(LoraSegment&&) noexcept = default;

  const LoraHeader& header() const { return *reinterpret_cast<const LoraHeader*>(segment_.data()); }
  LoraHeader& header() { return *reinterpret_cast<LoraHeader*>(segment_.data()); }
  LoraSlotHeader& slot(uint32_t i) { return header().slots[i]; }
  const LoraSlotHeader& slot(uint32_t i) const { return header().slots[i]; }
  // The geometry as attach() checked it (never read again from the shared header).
  uint32_t n_slots() const { return n_slots_; }
  int32_t max_rank() const { return max_rank_; }
  uint64_t slot_bytes() const { return slot_bytes_; }
  uint64_t nonce() const { return nonce_; }
  // Whether the file at path() is no longer the one mapped (removed, or replaced by a
  // loader that created another).
  bool replaced() const;
  const std::filesystem::path& path() const { return segment_.path(); }
  uint64_t size() const { return segment_.size(); }

  // The READY adapter named `name`.
  std::optional<LoraSlotInfo> find(std::string_view name) const;
  // Every READY and UNLOADING adapter, by slot.
  std::vector<LoraSlotInfo> list() const;
  // A copy of the adapter loaded under `id`, checked record by record (another process
  // wrote it): kNotFound when the slot holds no adapter under that id any more.
  Result<LoraAdapter> read(uint32_t slot, uint64_t id) const;

  // Writers. Each takes the writers' lock for its call.
  // Writes `adapter` into a free slot as READY under `name`: kInvalidArgument when an
  // adapter of that name is loaded, kOutOfRange when no slot is free or
  // when it exceeds the segment's rank or a slot's bytes.
  Result<LoraSlotInfo> write(const LoraAdapter& adapter, std::string_view name, std::string_view source);
  // Marks the adapter loaded in `slot` under `id` UNLOADING (no new request takes it);
  // one already UNLOADING stays so. kNotFound if the slot holds it no more.
  Status begin_unload(uint32_t slot, uint64_t id);
  // The engine's part: frees slot `slot` if it is still UNLOADING under `id`. It does so
  // once no request names it, in the same thread that admits requests, so that no request
  // is admitted for an adapter after its slot was freed. False when it was not UNLOADING
  // under `id`.
  bool free_unloaded(uint32_t slot, uint64_t id);
  // Makes an UNLOADING adapter READY again (an unload given up on).
  Status cancel_unload(uint32_t slot, uint64_t id);

 private:
  class WriterLock;
  Result<WriterLock> lock_writers();
  static Result<LoraSegment> adopt(ShmSegment segment);
  ShmSegment segment_;
  uint32_t n_slots_ = 0;
  int32_t max_rank_ = 0;
  uint64_t slot_bytes_ = 0;
  uint64_t nonce_ = 0;
  uint64_t inode_ = 0;
};

}  // namespace hearth
