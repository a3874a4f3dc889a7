#include "ipc/ring.h"

#include <new>

#include "common/test_point.h"

namespace hearth {

uint64_t ring_bytes(uint64_t capacity) { return sizeof(RingHeader) + capacity * sizeof(RingCell); }

void ring_init(void* memory, uint64_t capacity) {
  auto* h = new (memory) RingHeader{};
  h->enqueue_pos.store(0, std::memory_order_relaxed);
  h->dequeue_pos.store(0, std::memory_order_relaxed);
  h->capacity = capacity;
  h->mask = capacity - 1;
  auto* cells = reinterpret_cast<RingCell*>(static_cast<char*>(memory) + sizeof(RingHeader));
  for (uint64_t i = 0; i < capacity; ++i) {
    new (&cells[i]) RingCell{};
    cells[i].seq.store(i, std::memory_order_relaxed);
  }
  std::atomic_thread_fence(std::memory_order_release);
}

bool Ring::push(uint64_t value) {
  uint64_t pos = header_->enqueue_pos.load(std::memory_order_relaxed);
  while (true) {
    RingCell& cell = cells_[pos & header_->mask];
    const uint64_t seq = cell.seq.load(std::memory_order_acquire);
    const auto diff = static_cast<int64_t>(seq - pos);
    if (diff == 0) {
      if (header_->enqueue_pos.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        HEARTH_TEST_POINT("ring.push.claimed");  // a position taken, its cell not yet filled
        cell.value = value;
        cell.seq.store(pos + 1, std::memory_order_release);
        return true;
      }
    } else if (diff < 0) {
      return false;  // full
    } else {
      // Another producer took `pos`: go on from where they are. No progress at all means
      // a cell from a later lap than the counter (a corrupt segment): refuse, never spin.
      const uint64_t now = header_->enqueue_pos.load(std::memory_order_relaxed);
      if (now == pos) return false;
      pos = now;
    }
  }
}

std::optional<uint64_t> Ring::pop() {
  uint64_t pos = header_->dequeue_pos.load(std::memory_order_relaxed);
  while (true) {
    RingCell& cell = cells_[pos & header_->mask];
    const uint64_t seq = cell.seq.load(std::memory_order_acquire);
    const auto diff = static_cast<int64_t>(seq - (pos + 1));
    if (diff == 0) {
      if (header_->dequeue_pos.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
        HEARTH_TEST_POINT("ring.pop.claimed");  // a value taken, its cell not yet released
        const uint64_t value = cell.value;
        cell.seq.store(pos + header_->capacity, std::memory_order_release);
        return value;
      }
    } else if (diff < 0) {
      return std::nullopt;  // empty, or the head is still being written
    } else {
      const uint64_t now = header_->dequeue_pos.load(std::memory_order_relaxed);
      if (now == pos) return std::nullopt;  // as in push: a corrupt cell, not a race
      pos = now;
    }
  }
}

uint64_t Ring::size() const {
  const uint64_t e = header_->enqueue_pos.load(std::memory_order_acquire);
  const uint64_t d = header_->dequeue_pos.load(std::memory_order_acquire);
  return e > d ? e - d : 0;
}

bool Ring::skip_stalled_head() {
  uint64_t pos = header_->dequeue_pos.load(std::memory_order_acquire);
  if (header_->enqueue_pos.load(std::memory_order_acquire) <= pos) return false;
  RingCell& cell = cells_[pos & header_->mask];
  if (cell.seq.load(std::memory_order_acquire) != pos) return false;  // filled, or not ours to judge
  if (!header_->dequeue_pos.compare_exchange_strong(pos, pos + 1, std::memory_order_acq_rel)) return false;
  cell.seq.store(pos + header_->capacity, std::memory_order_release);
  return true;
}

void Ring::unfilled_positions(std::vector<uint64_t>& out) const {
  const uint64_t d = header_->dequeue_pos.load(std::memory_order_acquire);
  const uint64_t e = header_->enqueue_pos.load(std::memory_order_acquire);
  for (uint64_t pos = d; pos < e && pos - d < header_->capacity; ++pos) {
    if (cells_[pos & header_->mask].seq.load(std::memory_order_acquire) == pos) out.push_back(pos);
  }
}

void Ring::release_claimed() {
  const uint64_t d = header_->dequeue_pos.load(std::memory_order_acquire);
  const uint64_t first = d > header_->capacity ? d - header_->capacity : 0;
  for (uint64_t pos = first; pos < d; ++pos) {
    RingCell& cell = cells_[pos & header_->mask];
    uint64_t filled = pos + 1;
    cell.seq.compare_exchange_strong(filled, pos + header_->capacity, std::memory_order_acq_rel);
  }
}

}  // namespace hearth
