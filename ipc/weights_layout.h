// The weights segment's binary layout: written once by hearth-loader, then read-only.
//
//   [WeightsHeader, 4 KiB] [manifest: WeightsEntry x n_entries] [config JSON]
//   [tokenizer blob] [chat template] [token bytes] [rank 0 tensor data] ... [rank tp-1 tensor data]
//
// Token bytes: what each token adds to the text, for engines that match grammars and know
// no tokenizer: uint32 n, uint32 offsets[n + 1] (from the end of the offsets, ascending),
// then the bytes; a token that is not text (BOS, EOS, ...) has none.
//
// Every offset is from the start of the segment; tensors are 64-byte aligned and each
// tensor-parallel rank's tensors form one contiguous region, which starts on a 2 MiB
// boundary with huge pages (`data_alignment`).
// The only field that changes after creation is `state` (LOADING -> READY), an
// always-lock-free atomic. Readers check magic, version, sizes and state before
// trusting anything (weights_segment.h). Plain layout; no pointers.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "ipc/segment.h"
#include "ipc/segment_prologue.h"

namespace hearth {

inline constexpr uint64_t kWeightsMagic = 0x5354484757525448ull;  // "HTRWGHTS" little-endian
// 2: row-interleaved (R16) tensors; 3: names its layout; 4: token bytes; 5: F16/BF16 R16;
// 6: says how much of it is on 2 MiB pages (a loader adopting an older segment, likely on
// 4 KiB pages, replaces it instead)
inline constexpr uint32_t kWeightsLayoutVersion = 6;
inline constexpr uint32_t kWeightsHeaderBytes = 4096;
inline constexpr SegmentKind kWeightsSegment{"weights", kWeightsMagic, kWeightsLayoutVersion, kWeightsHeaderBytes,
                                            "restart hearth-loader from this build"};
inline constexpr int kMaxTensorParallel = 16;
inline constexpr uint64_t kTensorAlignment = 64;
inline constexpr uint64_t kHugePageAlignment = kHugePageBytes;  // --hugepages: one huge page

enum class SegmentState : uint32_t {
  kLoading = 1,  // being written; readers must not use it
  kReady = 2,    // complete and immutable
};
std::string_view segment_state_name(uint32_t state);

// How a tensor was split across tensor-parallel ranks.
enum class TensorSplit : uint32_t {
  kReplicated = 0,  // every rank holds all of it
  kRows = 1,        // column-parallel: each rank holds rows/tp output rows (q, k, v, gate, up)
  kCols = 2,        // row-parallel: each rank holds cols/tp input columns (o, down)
};

struct Fingerprint {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const Fingerprint&) const = default;
  std::string hex() const;  // 32 hex digits
};

struct WeightsHeader {
  SegmentPrologue prologue;  // ipc/segment_prologue.h
  std::atomic<uint32_t> state;
  int32_t creator_pid;
  uint64_t creator_start_time;  // /proc/<pid>/stat start time: tells a reused pid apart
  uint64_t created_unix_ms;
  // The loader holding the segment now: the creator, or a restarted loader that adopted
  // it. Updated with relaxed atomic stores; informational (hearth status).
  std::atomic<int32_t> owner_pid;
  std::atomic<uint64_t> owner_start_time;
  Fingerprint fingerprint;
  uint32_t tp_size;
  uint32_t data_alignment;
  uint64_t n_entries;
  uint64_t manifest_offset;
  uint64_t config_offset, config_bytes;        // ModelConfig as JSON
  uint64_t tokenizer_offset, tokenizer_bytes;  // tokenizer_source_encode() blob
  uint64_t template_offset, template_bytes;    // chat template text
  uint64_t token_bytes_offset, token_bytes_bytes;  // the token byte table
  uint64_t rank_offset[kMaxTensorParallel];    // each rank's data region
  uint64_t rank_bytes[kMaxTensorParallel];
  uint64_t source_bytes;                       // size of the model files read
  char model_name[128];                        // NUL-terminated
  char model_format[16];                       // "gguf", "safetensors", "llama2c"
  char source_path[512];                       // where the model was read from
  char quant[16];                              // "" or "int8" / "int4"
  char layout[16];                             // kLayoutPlain or kLayoutCpuR16 (common/tensor.h)
  uint64_t huge_page_bytes;                    // how much the loader placed on 2 MiB pages (at load)
};
static_assert(sizeof(WeightsHeader) <= kWeightsHeaderBytes);
static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::is_standard_layout_v<WeightsHeader>);

struct WeightsEntry {
  char name[96];      // canonical tensor name, NUL-terminated
  uint32_t dtype;     // DType
  uint32_t n_dims;
  int64_t shape[4];   // this rank's shard, outermost first
  uint32_t rank;
  uint32_t split;     // TensorSplit
  uint64_t offset;    // from the segment start
  uint64_t bytes;
  uint64_t device_offset;  // offset in the rank's device slab (GPU backends)
};
static_assert(sizeof(WeightsEntry) == 168);
static_assert(std::is_trivially_copyable_v<WeightsEntry>);

}  // namespace hearth
