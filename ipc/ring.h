// A bounded multi-producer multi-consumer queue of 32-bit values living in shared memory
// (Vyukov's sequence-numbered cells): lock-free, address-free (offsets only), usable by
// many processes at once. `capacity` is a power of two.
//
// Cell i holds a sequence number: i when free for the producer of lap 0, pos + 1 once a
// value for position pos is in it, pos + capacity once it has been consumed. Producers
// and consumers claim positions with a CAS on their counter, then hand the cell over
// with a release store of its sequence.
//
// A process killed between the claim and the hand-over leaves a cell stuck; the sole
// consumer (the engine) can skip such a stalled head after a grace period
// (ring_skip_stalled_head) and, after its own restart, release cells it had claimed but
// not released (ring_release_claimed). Slot states in the broker are the truth; the ring
// is their doorbell and keeps first-come-first-served order.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

namespace hearth {

struct alignas(64) RingHeader {
  std::atomic<uint64_t> enqueue_pos;
  char pad0[56];
  std::atomic<uint64_t> dequeue_pos;
  char pad1[56];
  uint64_t capacity;  // power of two
  uint64_t mask;
};

struct RingCell {
  std::atomic<uint64_t> seq;
  uint64_t value;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(RingCell) == 16);

// Bytes for a ring of `capacity` cells (header included).
uint64_t ring_bytes(uint64_t capacity);

// Initialises a ring at `memory` (ring_bytes(capacity) bytes, 64-byte aligned).
void ring_init(void* memory, uint64_t capacity);

// A view of a ring in (shared) memory. Cheap to copy.
class Ring {
 public:
  explicit Ring(void* memory)
      : header_(static_cast<RingHeader*>(memory)),
        cells_(reinterpret_cast<RingCell*>(static_cast<char*>(memory) + sizeof(RingHeader))) {}

  // Adds a value; false when the ring is full.
  bool push(uint64_t value);
  // Takes the oldest value, or nullopt when the ring is empty (or its head is still
  // being written by a producer).
  std::optional<uint64_t> pop();
  // Positions taken by producers but not yet consumed (approximate under concurrency).
  uint64_t size() const;
  uint64_t capacity() const { return header_->capacity; }

  // Consumer-side repairs (see the file comment). skip: when the head cell has not been
  // filled although its position was claimed, mark it consumed and move on; returns true
  // if it skipped. release_claimed: cells before dequeue_pos still marked filled (claimed
  // by a consumer that died) are marked consumed so producers can reuse them.
  bool skip_stalled_head();
  void release_claimed();
  // The position the next pop takes, and the positions taken by producers whose cells
  // are not filled yet (appended to `out`, oldest first): a consumer ages them to tell a
  // dead producer's hole from a slow one.
  uint64_t head_position() const { return header_->dequeue_pos.load(std::memory_order_acquire); }
  void unfilled_positions(std::vector<uint64_t>& out) const;

 private:
  RingHeader* header_;
  RingCell* cells_;
};

}  // namespace hearth
