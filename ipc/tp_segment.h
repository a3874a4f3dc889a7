// The `tp` segment of a tensor-parallel engine group (tp_layout.h): created by rank 0,
// attached by ranks 1..tp-1, every header field checked before it is trusted.
//
// open_or_create keeps a segment that matches (ranks waiting in it for a restarted rank
// 0 stay attached) and otherwise replaces it: the old file is marked retired, so ranks
// still mapping it attach again, and a new one takes its path. A segment whose rank 0
// is alive belongs to that process and is refused. Rank entries are claimed with a CAS
// on the pid, so two processes never hold one rank. Move-only; the mapping may be used
// from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>

#include "common/status.h"
#include "ipc/segment.h"
#include "ipc/tp_layout.h"

namespace hearth {

struct TpSegmentConfig {
  uint32_t tp_size = 1;
  Fingerprint weights;
  TpGeometry geometry{};
  uint64_t step_capacity = 0;  // bytes of the largest step input
  uint64_t reduce_floats = 0;  // floats a collective moves at once
};

// Whether a rank's process is there, as judged from its entry.
enum class TpLiveness { kAlive, kGone, kSilent };

class TpSegment {
 public:
  // Rank 0's entry point.
  static Result<TpSegment> open_or_create(const std::filesystem::path& path, const TpSegmentConfig& config);
  // Ranks 1..tp-1: kNotFound while there is none, kFormat when it is malformed.
  // `writable` false: for readers such as hearth status and the frontend's metrics.
  static Result<TpSegment> attach(const std::filesystem::path& path, bool writable = true);

  TpHeader& header() const { return *header_; }
  TpRankEntry& rank(int r) const { return header_->ranks[r]; }
  int tp_size() const { return static_cast<int>(header_->tp_size); }
  std::byte* step_area() const { return segment_.data() + header_->step_offset; }
  float* reduce_buffer(int rank, int parity) const;
  const std::filesystem::path& path() const { return segment_.path(); }
  bool retired() const { return header_->retired.load(std::memory_order_acquire) != 0; }

  // Claims entry `rank` for this process (state kWaiting). kUnavailable naming the pid
  // when a live process holds it.
  Status register_rank(int rank) const;
  // Frees entry `rank` if this process holds it.
  void unregister_rank(int rank) const;
  void heartbeat(int rank) const;
  TpLiveness liveness(int rank, std::chrono::milliseconds stale, uint64_t now_ns) const;

 private:
  TpSegment() = default;
  Status validate(uint64_t file_bytes) const;

  ShmSegment segment_;
  TpHeader* header_ = nullptr;
};

uint64_t tp_segment_bytes(const TpSegmentConfig& config);

}  // namespace hearth
