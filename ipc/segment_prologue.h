// The first 24 bytes of every shared-memory segment's header (broker, tp, KV, weights):
// what the segment is (magic), which layout it has, and its sizes. Each segment kind
// writes and checks them with the same two functions, so a stale file from another build,
// a truncated one or another kind's file is refused the same way everywhere.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace hearth {

struct SegmentPrologue {
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_bytes;  // the header's size: data starts at or after it
  uint64_t total_bytes;   // the file's size
};
static_assert(std::is_standard_layout_v<SegmentPrologue> && sizeof(SegmentPrologue) == 24);

// One kind of segment, as its prologue says it and its messages name it.
struct SegmentKind {
  std::string_view name;     // "broker", "tp", "KV", "weights"
  uint64_t magic;
  uint32_t layout_version;
  uint32_t header_bytes;
  std::string_view replaced_by;  // who replaces a stale one ("restart hearth-loader from this build")
};

void segment_prologue_init(SegmentPrologue& p, const SegmentKind& kind, uint64_t total_bytes);

// kFormat naming `path` when a file of `file_bytes` is too short for the kind's header,
// is another kind's (or no segment at all), has another layout version, or says another
// size than the file has. `p` is read only when the file holds a header.
Status segment_prologue_check(const SegmentPrologue& p, const SegmentKind& kind, uint64_t file_bytes,
                              const std::filesystem::path& path);

}  // namespace hearth
