#include "ipc/tp_segment.h"

#include <time.h>
#include <unistd.h>

#include <cstring>
#include <new>
#include <system_error>

#include "common/log.h"
#include "common/process.h"
#include "ipc/broker.h"
#include "ipc/futex.h"

namespace hearth {

std::string_view tp_group_state_name(uint32_t state) {
  switch (static_cast<TpGroupState>(state)) {
    case TpGroupState::kNone: return "none";
    case TpGroupState::kForming: return "forming";
    case TpGroupState::kActive: return "active";
    case TpGroupState::kBroken: return "broken";
  }
  return "invalid";
}

std::string_view tp_break_name(uint32_t why) {
  switch (static_cast<TpBreak>(why)) {
    case TpBreak::kNone: return "none";
    case TpBreak::kRankGone: return "rank gone";
    case TpBreak::kRankSilent: return "rank silent";
    case TpBreak::kTimeout: return "collective timeout";
    case TpBreak::kStopped: return "rank stopped";
    case TpBreak::kJoinTimeout: return "join timeout";
  }
  return "invalid";
}

namespace {

uint64_t align64(uint64_t v) { return (v + 63) / 64 * 64; }

bool same_geometry(const TpGeometry& a, const TpGeometry& b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

}  // namespace

uint64_t tp_segment_bytes(const TpSegmentConfig& c) {
  return kTpHeaderBytes + align64(c.step_capacity) + uint64_t{c.tp_size} * 2 * align64(c.reduce_floats * sizeof(float));
}

float* TpSegment::reduce_buffer(int rank, int parity) const {
  const uint64_t stride = align64(header_->reduce_floats * sizeof(float));
  return reinterpret_cast<float*>(segment_.data() + header_->reduce_offset +
                                  (static_cast<uint64_t>(rank) * 2 + static_cast<uint64_t>(parity)) * stride);
}

Status TpSegment::validate(uint64_t file_bytes) const {
  const std::string p = segment_.path().string();
  const TpHeader& h = *header_;
  HEARTH_RETURN_IF_ERROR(segment_prologue_check(h.prologue, kTpSegment, file_bytes, segment_.path()));
  const TpSegmentConfig c{h.tp_size, h.weights, h.geometry, h.step_capacity, h.reduce_floats};
  if (h.tp_size < 1 ||
      h.tp_size > kMaxTensorParallel || h.step_capacity > (1ull << 32) || h.reduce_floats > (1ull << 32) ||
      h.step_offset != kTpHeaderBytes || h.reduce_offset != kTpHeaderBytes + align64(h.step_capacity) ||
      tp_segment_bytes(c) != file_bytes) {
    return make_error(ErrorCode::kFormat, "{} has an inconsistent header (size {}, tp {}); remove it", p, file_bytes,
                      h.tp_size);
  }
  return Status::ok();
}

Result<TpSegment> TpSegment::attach(const std::filesystem::path& path, bool writable) {
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::attach(path, writable));
  TpSegment t;
  t.header_ = reinterpret_cast<TpHeader*>(seg.data());
  t.segment_ = std::move(seg);
  HEARTH_RETURN_IF_ERROR(t.validate(t.segment_.size()));
  return t;
}

Result<TpSegment> TpSegment::open_or_create(const std::filesystem::path& path, const TpSegmentConfig& config) {
  if (config.tp_size < 1 || config.tp_size > static_cast<uint32_t>(kMaxTensorParallel) || config.reduce_floats < 1) {
    return make_error(ErrorCode::kInvalidArgument, "a tp segment needs 1..{} ranks and reduce buffers",
                      kMaxTensorParallel);
  }
  if (std::filesystem::exists(path)) {
    auto existing = attach(path);
    if (existing.is_ok()) {
      const TpHeader& h = existing->header();
      const TpRankEntry& r0 = existing->rank(0);
      const int32_t pid = r0.pid.load(std::memory_order_acquire);
      if (pid != 0 && pid != ::getpid() && process_alive(pid, r0.start_time.load(std::memory_order_relaxed))) {
        return make_error(ErrorCode::kUnavailable, "rank 0 of this group already runs as pid {} ({})", pid,
                          path.string());
      }
      if (h.tp_size == config.tp_size && h.weights == config.weights && same_geometry(h.geometry, config.geometry) &&
          h.step_capacity == config.step_capacity && h.reduce_floats == config.reduce_floats) {
        return existing;  // the ranks of the last group may be waiting in it
      }
      HEARTH_LOG_INFO("replacing tp segment {} (tp {} -> {}, or other weights or geometry)", path.string(), h.tp_size,
                      config.tp_size);
      existing->header().retired.store(1, std::memory_order_release);
      futex_signal(existing->header().group_word);
    } else {
      HEARTH_LOG_WARN("replacing unusable tp segment: {}", existing.status().message());
    }
    std::error_code ec;
    std::filesystem::remove(path, ec);
  }
  HEARTH_ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::create(path, tp_segment_bytes(config)));
  TpSegment t;
  t.header_ = new (seg.data()) TpHeader{};
  TpHeader& h = *t.header_;
  segment_prologue_init(h.prologue, kTpSegment, tp_segment_bytes(config));
  h.tp_size = config.tp_size;
  h.weights = config.weights;
  h.geometry = config.geometry;
  h.creator_pid = ::getpid();
  h.creator_start_time = process_start_time(::getpid());
  h.created_unix_ms = static_cast<uint64_t>(::time(nullptr)) * 1000;
  h.step_offset = kTpHeaderBytes;
  h.step_capacity = config.step_capacity;
  h.reduce_offset = kTpHeaderBytes + align64(config.step_capacity);
  h.reduce_floats = config.reduce_floats;
  h.broken_rank.store(-1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  seg.publish();
  t.segment_ = std::move(seg);
  return t;
}

Status TpSegment::register_rank(int r) const {
  if (r < 0 || r >= tp_size()) {
    return make_error(ErrorCode::kInvalidArgument, "rank {} is not a rank of this group of {}", r, tp_size());
  }
  TpRankEntry& e = rank(r);
  const int32_t me = ::getpid();
  int32_t pid = e.pid.load(std::memory_order_acquire);
  if (pid != me && pid != 0 && process_alive(pid, e.start_time.load(std::memory_order_relaxed))) {
    return make_error(ErrorCode::kUnavailable, "rank {} already runs as pid {}", r, pid);
  }
  if (!e.pid.compare_exchange_strong(pid, me, std::memory_order_acq_rel)) {
    return make_error(ErrorCode::kUnavailable, "rank {} was just taken by pid {}", r, pid);
  }
  e.start_time.store(process_start_time(me), std::memory_order_relaxed);
  e.epoch.store(0, std::memory_order_relaxed);
  e.kv_id.store(0, std::memory_order_relaxed);
  e.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  e.state.store(static_cast<uint32_t>(TpRankState::kWaiting), std::memory_order_release);
  futex_signal(header_->group_word);
  return Status::ok();
}

void TpSegment::unregister_rank(int r) const {
  if (r < 0 || r >= tp_size()) return;
  TpRankEntry& e = rank(r);
  int32_t me = ::getpid();
  e.state.store(static_cast<uint32_t>(TpRankState::kAbsent), std::memory_order_release);
  e.pid.compare_exchange_strong(me, 0, std::memory_order_acq_rel);
  futex_signal(header_->group_word);
}

void TpSegment::heartbeat(int r) const { rank(r).heartbeat_ns.store(monotonic_ns(), std::memory_order_release); }

TpLiveness TpSegment::liveness(int r, std::chrono::milliseconds stale, uint64_t now) const {
  const TpRankEntry& e = rank(r);
  const int32_t pid = e.pid.load(std::memory_order_acquire);
  if (pid == 0 || !process_alive(pid, e.start_time.load(std::memory_order_relaxed))) return TpLiveness::kGone;
  const uint64_t beat = e.heartbeat_ns.load(std::memory_order_acquire);
  const auto limit = static_cast<uint64_t>(std::chrono::nanoseconds(stale).count());
  if (now > beat && now - beat > limit) return TpLiveness::kSilent;
  return TpLiveness::kAlive;
}

}  // namespace hearth
