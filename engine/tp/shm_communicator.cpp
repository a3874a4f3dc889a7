#include "engine/tp/shm_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/process.h"
#include "common/spin.h"
#include "engine/tp/tp_group.h"
#include "ipc/futex.h"

namespace hearth {
namespace {

class ShmCommunicator final : public EpochCommunicator {
 public:
  explicit ShmCommunicator(TpGroup& group) : group_(group), h_(group.segment().header()) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  Status all_reduce_sum(float* data, int64_t n, DeviceQueue) override {
    const auto chunk = static_cast<int64_t>(h_.reduce_floats);
    const int ranks = size();
    for (int64_t at = 0; at < n; at += chunk) {
      const int64_t m = std::min(chunk, n - at);
      const int parity = static_cast<int>(round_ & 1);  // the round this collective takes
      std::memcpy(group_.segment().reduce_buffer(rank(), parity), data + at, static_cast<size_t>(m) * sizeof(float));
      HEARTH_RETURN_IF_ERROR(arrive_and_wait());
      // Every rank adds the same buffers in the same order: the same bits everywhere.
      float* out = data + at;
      const float* first = group_.segment().reduce_buffer(0, parity);
      std::memcpy(out, first, static_cast<size_t>(m) * sizeof(float));
      for (int r = 1; r < ranks; ++r) {
        const float* in = group_.segment().reduce_buffer(r, parity);
        for (int64_t i = 0; i < m; ++i) out[i] += in[i];
      }
    }
    return Status::ok();
  }

  Status broadcast(void* data, size_t bytes, int root, DeviceQueue) override {
    if (root < 0 || root >= size()) {
      return make_error(ErrorCode::kInvalidArgument, "broadcast from rank {} in a group of {}", root, size());
    }
    const size_t chunk = h_.reduce_floats * sizeof(float);
    auto* p = static_cast<std::byte*>(data);
    for (size_t at = 0; at < bytes; at += chunk) {
      const size_t m = std::min(chunk, bytes - at);
      const int parity = static_cast<int>(round_ & 1);
      auto* buffer = reinterpret_cast<std::byte*>(group_.segment().reduce_buffer(root, parity));
      if (rank() == root) std::memcpy(buffer, p + at, m);
      HEARTH_RETURN_IF_ERROR(arrive_and_wait());
      if (rank() != root) std::memcpy(p + at, buffer, m);
    }
    return Status::ok();
  }

  Status barrier() override { return arrive_and_wait(); }

  // A new epoch: the arrival counter starts again from zero (rank 0 reset it).
  Status begin_epoch(uint64_t, std::span<const unsigned char>, std::chrono::milliseconds) override {
    round_ = 0;
    return Status::ok();
  }

 private:
  static bool reached(uint32_t arrived, uint32_t target) { return static_cast<int32_t>(arrived - target) >= 0; }

  // Round k of an epoch is complete when k * size arrivals have been counted. Buffers
  // alternate by round parity: a rank writes round k's buffer only after round k - 1
  // completed, which every rank reached after reading round k - 2's, so one barrier
  // per collective suffices.
  Status arrive_and_wait() {
    ++round_;
    const uint32_t target = round_ * static_cast<uint32_t>(size());
    const uint32_t before = h_.arrive.fetch_add(1, std::memory_order_seq_cst);
    if (before + 1 == target) {
      if (h_.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(h_.arrive);
      return Status::ok();
    }
    const uint64_t started = monotonic_ns();
    while (monotonic_ns() - started < kSpinBeforeSleepNs) {
      for (int i = 0; i < 64; ++i) {
        if (reached(h_.arrive.load(std::memory_order_acquire), target)) return Status::ok();
        cpu_relax();
      }
    }
    while (true) {
      h_.sleepers.fetch_add(1, std::memory_order_seq_cst);
      const uint32_t seen = h_.arrive.load(std::memory_order_seq_cst);
      if (!reached(seen, target)) futex_wait(h_.arrive, seen, std::chrono::milliseconds(20));
      h_.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      if (reached(h_.arrive.load(std::memory_order_acquire), target)) return Status::ok();
      HEARTH_RETURN_IF_ERROR(group_.wait_check(started, /*idle=*/false));
    }
  }

  TpGroup& group_;
  TpHeader& h_;
  uint32_t round_ = 0;
};

}  // namespace

std::unique_ptr<EpochCommunicator> make_shm_communicator(TpGroup& group) {
  return std::make_unique<ShmCommunicator>(group);
}

}  // namespace hearth
