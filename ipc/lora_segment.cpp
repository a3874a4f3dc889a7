#include "ipc/lora_segment.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <system_error>

#include <fmt/format.h>

namespace hearth {

namespace {

uint64_t align64(uint64_t v) { return (v + 63) / 64 * 64; }

std::string fixed(const char* s, size_t n) { return std::string(s, ::strnlen(s, n)); }

void copy_fixed(char* out, size_t n, std::string_view s) {
  std::memset(out, 0, n);
  std::memcpy(out, s.data(), std::min(s.size(), n - 1));
}

uint64_t unix_ms_now() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// A random id other than 0 (which means none).
uint64_t random_nonzero_id() {
  std::random_device random;
  uint64_t id = 0;
  while (id == 0) id = (uint64_t{random()} << 32) | random();
  return id;
}

LoraSlotInfo info_of(uint32_t index, const LoraSlotHeader& s) {
  return {.slot = index,
          .id = s.id.load(std::memory_order_acquire),
          .name = fixed(s.name, sizeof(s.name)),
          .source = fixed(s.source, sizeof(s.source)),
          .max_rank = s.max_rank,
          .n_matrices = s.n_matrices,
          .loaded_unix_ms = s.loaded_unix_ms,
          .unloading = s.state.load(std::memory_order_acquire) == static_cast<uint32_t>(LoraSlotState::kUnloading)};
}

bool holds_adapter(uint32_t state) {
  return state == static_cast<uint32_t>(LoraSlotState::kReady) ||
         state == static_cast<uint32_t>(LoraSlotState::kUnloading);
}

}  // namespace

std::string_view lora_slot_state_name(uint32_t state) {
  switch (static_cast<LoraSlotState>(state)) {
    case LoraSlotState::kFree: return "free";
    case LoraSlotState::kWriting: return "writing";
    case LoraSlotState::kReady: return "ready";
    case LoraSlotState::kUnloading: return "unloading";
  }
  return "invalid";
}

uint64_t lora_record_bytes(int64_t rank, int64_t rows, int64_t cols) {
  return align64(sizeof(LoraRecord) + static_cast<uint64_t>(rank) * static_cast<uint64_t>(rows + cols) * sizeof(float));
}

Status lora_name_check(std::string_view name) {
  if (name.empty() || name.size() >= kLoraNameBytes) {
    return make_error(ErrorCode::kInvalidArgument, "an adapter's name has 1 to {} bytes, not {}", kLoraNameBytes - 1,
                      name.size());
  }
  for (const char c : name) {
    if (c <= 0x20 || c >= 0x7F || c == '"' || c == '\'' || c == '\\' || c == '=' || c == ',') {
      return make_error(ErrorCode::kInvalidArgument,
                        "adapter name \"{}\": printable ASCII without spaces, quotes, backslashes, '=' or ',' only",
                        name);
    }
  }
  return Status::ok();
}

// The writers' lock: an flock on the segment's file, let go of when the process dies.
class LoraSegment::WriterLock {
 public:
  explicit WriterLock(int fd) : fd_(fd) {}
  WriterLock(WriterLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  WriterLock& operator=(WriterLock&&) = delete;
  ~WriterLock() {
    if (fd_ >= 0) ::close(fd_);  // closing the only descriptor of the lock releases it
  }

 private:
  int fd_;
};

Result<LoraSegment::WriterLock> LoraSegment::lock_writers() {
  const int fd = ::open(path().c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return make_error(ErrorCode::kIo, "{}: {}", path().string(), std::strerror(errno));
  while (::flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int err = errno;
    ::close(fd);
    return make_error(ErrorCode::kIo, "{}: cannot lock it: {}", path().string(), std::strerror(err));
  }
  WriterLock lock(fd);
  // A slot a dead writer left half written holds nothing: free again.
  for (uint32_t i = 0; i < n_slots(); ++i) {
    std::atomic<uint32_t>& state = slot(i).state;
    if (state.load(std::memory_order_acquire) == static_cast<uint32_t>(LoraSlotState::kWriting)) {
      state.store(static_cast<uint32_t>(LoraSlotState::kFree), std::memory_order_release);
    }
  }
  return lock;
}

Result<LoraSegment> LoraSegment::create(const std::filesystem::path& path, const LoraSegmentConfig& c) {
  if (c.n_slots < 1 || c.n_slots > static_cast<uint32_t>(kMaxLoraSlots)) {
    return make_error(ErrorCode::kInvalidArgument, "--max-loras must be 1..{}, not {}", kMaxLoraSlots, c.n_slots);
  }
  if (c.max_rank < 1 || c.slot_bytes == 0 || c.slot_bytes % 64 != 0) {
    return make_error(ErrorCode::kInvalidArgument, "an adapter segment needs a rank of at least 1 and slot bytes");
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  const uint64_t total = kLoraHeaderBytes + c.slot_bytes * c.n_slots;
  HEARTH_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::create(path, total));
  auto* h = new (segment.data()) LoraHeader{};
  segment_prologue_init(h->prologue, kLoraSegment, total);
  h->base = c.base;
  h->n_slots = c.n_slots;
  h->max_rank = c.max_rank;
  h->slot_bytes = c.slot_bytes;
  h->slots_offset = kLoraHeaderBytes;
  h->created_unix_ms = unix_ms_now();
  h->nonce = random_nonzero_id();
  segment.publish();
  return adopt(std::move(segment));
}

Result<LoraSegment> LoraSegment::adopt(ShmSegment segment) {
  const auto* h = reinterpret_cast<const LoraHeader*>(segment.data());
  const uint32_t n_slots = h->n_slots;
  const int32_t max_rank = h->max_rank;
  const uint64_t slot_bytes = h->slot_bytes;
  if (n_slots < 1 || n_slots > static_cast<uint32_t>(kMaxLoraSlots) || max_rank < 1 || max_rank > 1024 ||
      slot_bytes % 64 != 0 || h->slots_offset != kLoraHeaderBytes || h->nonce == 0 ||
      slot_bytes > (segment.size() - kLoraHeaderBytes) / n_slots) {
    return make_error(ErrorCode::kFormat, "{}: the adapter segment's header is inconsistent ({} slots of {} bytes, "
                      "ranks up to {})", segment.path().string(), n_slots, slot_bytes, max_rank);
  }
  struct stat st {};
  LoraSegment out;
  out.inode_ = ::stat(segment.path().c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
  out.n_slots_ = n_slots;
  out.max_rank_ = max_rank;
  out.slot_bytes_ = slot_bytes;
  out.nonce_ = h->nonce;
  out.segment_ = std::move(segment);
  return out;
}

bool LoraSegment::replaced() const {
  struct stat st {};
  return ::stat(path().c_str(), &st) != 0 || static_cast<uint64_t>(st.st_ino) != inode_;
}

Result<LoraSegment> LoraSegment::attach(const std::filesystem::path& path, bool writable) {
  HEARTH_ASSIGN_OR_RETURN(ShmSegment segment, ShmSegment::attach(path, writable));
  const auto* h = reinterpret_cast<const LoraHeader*>(segment.data());
  HEARTH_RETURN_IF_ERROR(segment_prologue_check(h->prologue, kLoraSegment, segment.size(), path));
  return adopt(std::move(segment));
}

std::optional<LoraSlotInfo> LoraSegment::find(std::string_view name) const {
  for (uint32_t i = 0; i < n_slots(); ++i) {
    const LoraSlotHeader& s = slot(i);
    // The id first, then state and name, then the id again: a slot freed and loaded again
    // meanwhile (under a new id) is not taken for the adapter named.
    const uint64_t id = s.id.load(std::memory_order_acquire);
    if (s.state.load(std::memory_order_acquire) != static_cast<uint32_t>(LoraSlotState::kReady)) continue;
    if (fixed(s.name, sizeof(s.name)) != name) continue;
    LoraSlotInfo info = info_of(i, s);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.id.load(std::memory_order_relaxed) != id || info.id != id) continue;
    return info;
  }
  return std::nullopt;
}

std::vector<LoraSlotInfo> LoraSegment::list() const {
  std::vector<LoraSlotInfo> out;
  for (uint32_t i = 0; i < n_slots(); ++i) {
    if (holds_adapter(slot(i).state.load(std::memory_order_acquire))) out.push_back(info_of(i, slot(i)));
  }
  return out;
}

Result<LoraAdapter> LoraSegment::read(uint32_t index, uint64_t id) const {
  if (index >= n_slots()) return make_error(ErrorCode::kOutOfRange, "adapter slot {} of {}", index, n_slots());
  const LoraSlotHeader& s = slot(index);
  if (!holds_adapter(s.state.load(std::memory_order_acquire)) || id == 0 ||
      s.id.load(std::memory_order_acquire) != id) {
    return make_error(ErrorCode::kNotFound, "adapter slot {} no longer holds the adapter the request named (it was "
                      "unloaded)", index);
  }
  const std::byte* base = segment_.data() + kLoraHeaderBytes + slot_bytes_ * index;
  const uint64_t bytes = s.data_bytes;
  if (bytes > slot_bytes_ || s.n_matrices == 0) {
    return make_error(ErrorCode::kFormat, "{}: adapter slot {} says {} bytes of {}", path().string(), index, bytes,
                      slot_bytes_);
  }
  LoraAdapter out;
  out.name = fixed(s.name, sizeof(s.name));
  uint64_t at = 0;
  for (uint32_t m = 0; m < s.n_matrices; ++m) {
    LoraRecord r;
    if (bytes - at < sizeof r) return make_error(ErrorCode::kFormat, "{}: adapter slot {} is truncated", path().string(), index);
    std::memcpy(&r, base + at, sizeof r);
    if (r.rank < 1 || r.rank > max_rank_ || !std::isfinite(r.scale) || r.target >= static_cast<uint32_t>(kLoraTargets) || r.layer < 0 ||
        r.rows < 1 || r.cols < 1 || r.rows > (int64_t{1} << 24) || r.cols > (int64_t{1} << 24) ||
        lora_record_bytes(r.rank, r.rows, r.cols) > bytes - at) {
      return make_error(ErrorCode::kFormat, "{}: adapter slot {} has a malformed matrix record", path().string(), index);
    }
    LoraMatrix matrix{.layer = r.layer, .target = static_cast<LoraTarget>(r.target), .rank = r.rank, .rows = r.rows,
                      .cols = r.cols, .scale = r.scale};
    const auto* a = reinterpret_cast<const float*>(base + at + sizeof r);
    const size_t na = static_cast<size_t>(r.rank * r.cols), nb = static_cast<size_t>(r.rows * r.rank);
    matrix.a.assign(a, a + na);
    matrix.b.assign(a + na, a + na + nb);
    out.max_rank = std::max(out.max_rank, r.rank);
    out.matrices.push_back(std::move(matrix));
    at += lora_record_bytes(r.rank, r.rows, r.cols);
  }
  // The writer does not reuse a slot while it is READY or UNLOADING: still the same id
  // means nothing changed under the copy.
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.id.load(std::memory_order_acquire) != id || !holds_adapter(s.state.load(std::memory_order_acquire))) {
    return make_error(ErrorCode::kNotFound, "adapter slot {} was unloaded while it was read", index);
  }
  return out;
}

Result<LoraSlotInfo> LoraSegment::write(const LoraAdapter& adapter, std::string_view name, std::string_view source) {
  HEARTH_RETURN_IF_ERROR(lora_name_check(name));
  uint64_t bytes = 0;
  for (const LoraMatrix& m : adapter.matrices) {
    if (m.rank > max_rank_) {
      return make_error(ErrorCode::kOutOfRange, "adapter \"{}\" has rank {}; this instance holds ranks up to {} "
                        "(hearth-loader --max-lora-rank)", name, m.rank, max_rank_);
    }
    if (m.a.size() != static_cast<size_t>(m.rank * m.cols) || m.b.size() != static_cast<size_t>(m.rows * m.rank)) {
      return make_error(ErrorCode::kInternal, "adapter \"{}\": factor sizes disagree with their shapes", name);
    }
    bytes += lora_record_bytes(m.rank, m.rows, m.cols);
  }
  if (adapter.matrices.empty()) return make_error(ErrorCode::kInvalidArgument, "adapter \"{}\" adapts nothing", name);
  if (bytes > slot_bytes_) {
    return make_error(ErrorCode::kOutOfRange, "adapter \"{}\" takes {}; a slot holds {}", name, human_bytes(bytes),
                      human_bytes(slot_bytes_));
  }
  HEARTH_ASSIGN_OR_RETURN(WriterLock lock, lock_writers());
  std::optional<uint32_t> free_slot;
  for (uint32_t i = 0; i < n_slots(); ++i) {
    const uint32_t state = slot(i).state.load(std::memory_order_acquire);
    if (holds_adapter(state) && fixed(slot(i).name, sizeof(slot(i).name)) == name) {
      return make_error(ErrorCode::kInvalidArgument, "an adapter named \"{}\" is already loaded{}", name,
                        state == static_cast<uint32_t>(LoraSlotState::kUnloading) ? " (it is being unloaded)" : "");
    }
    if (!free_slot && state == static_cast<uint32_t>(LoraSlotState::kFree)) free_slot = i;
  }
  if (!free_slot) {
    return make_error(ErrorCode::kOutOfRange, "all {} adapter slots are taken (hearth-loader --max-loras); "
                      "unload one first", n_slots());
  }
  LoraSlotHeader& s = slot(*free_slot);
  s.state.store(static_cast<uint32_t>(LoraSlotState::kWriting), std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_release);
  std::byte* base = segment_.data() + kLoraHeaderBytes + slot_bytes_ * *free_slot;
  uint64_t at = 0;
  for (const LoraMatrix& m : adapter.matrices) {
    const LoraRecord r{m.layer, static_cast<uint32_t>(m.target), m.rank, m.scale, m.rows, m.cols};
    std::memcpy(base + at, &r, sizeof r);
    std::memcpy(base + at + sizeof r, m.a.data(), m.a.size() * sizeof(float));
    std::memcpy(base + at + sizeof r + m.a.size() * sizeof(float), m.b.data(), m.b.size() * sizeof(float));
    at += lora_record_bytes(m.rank, m.rows, m.cols);
  }
  const uint64_t id = random_nonzero_id();
  s.max_rank = adapter.max_rank;
  s.data_bytes = bytes;
  s.n_matrices = static_cast<uint32_t>(adapter.matrices.size());
  s.loaded_unix_ms = unix_ms_now();
  copy_fixed(s.name, sizeof(s.name), name);
  copy_fixed(s.source, sizeof(s.source), source);
  s.id.store(id, std::memory_order_release);
  s.state.store(static_cast<uint32_t>(LoraSlotState::kReady), std::memory_order_release);
  return info_of(*free_slot, s);
}

Status LoraSegment::begin_unload(uint32_t index, uint64_t id) {
  HEARTH_ASSIGN_OR_RETURN(WriterLock lock, lock_writers());
  if (index >= n_slots()) return make_error(ErrorCode::kOutOfRange, "adapter slot {} of {}", index, n_slots());
  LoraSlotHeader& s = slot(index);
  uint32_t ready = static_cast<uint32_t>(LoraSlotState::kReady);
  if (s.id.load(std::memory_order_acquire) == id &&
      (s.state.compare_exchange_strong(ready, static_cast<uint32_t>(LoraSlotState::kUnloading)) ||
       ready == static_cast<uint32_t>(LoraSlotState::kUnloading))) {
    return Status::ok();
  }
  return make_error(ErrorCode::kNotFound, "adapter slot {} no longer holds the adapter to unload", index);
}

bool LoraSegment::free_unloaded(uint32_t index, uint64_t id) {
  if (index >= n_slots()) return false;
  LoraSlotHeader& s = slot(index);
  uint32_t unloading = static_cast<uint32_t>(LoraSlotState::kUnloading);
  return s.id.load(std::memory_order_acquire) == id &&
         s.state.compare_exchange_strong(unloading, static_cast<uint32_t>(LoraSlotState::kFree),
                                         std::memory_order_acq_rel);
}

Status LoraSegment::cancel_unload(uint32_t index, uint64_t id) {
  if (index >= n_slots()) return make_error(ErrorCode::kOutOfRange, "adapter slot {} of {}", index, n_slots());
  HEARTH_ASSIGN_OR_RETURN(WriterLock lock, lock_writers());
  LoraSlotHeader& s = slot(index);
  uint32_t unloading = static_cast<uint32_t>(LoraSlotState::kUnloading);
  if (s.id.load(std::memory_order_acquire) != id ||
      !s.state.compare_exchange_strong(unloading, static_cast<uint32_t>(LoraSlotState::kReady))) {
    return make_error(ErrorCode::kNotFound, "adapter slot {} is no longer being unloaded", index);
  }
  return Status::ok();
}

}  // namespace hearth
