#include "engine/tp/tp_group.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/check.h"
#include "common/log.h"
#include "common/spin.h"
#include "engine/tp/collective_watchdog.h"
#include "engine/tp/shm_communicator.h"
#include "engine/cuda/cuda_backend.h"
#include "ipc/broker.h"
#include "ipc/futex.h"

#if HEARTH_HAVE_NCCL
#include "engine/tp/nccl_communicator.h"
#endif

namespace hearth {
namespace {

constexpr uint64_t kMs = 1000000ull;
constexpr uint64_t kMemberCheckNs = 50 * kMs;  // how often waits look at the other ranks

uint64_t ns_of(std::chrono::milliseconds ms) { return static_cast<uint64_t>(ms.count()) * kMs; }

std::chrono::microseconds sleep_for(uint64_t now, uint64_t deadline, uint64_t cap_ns) {
  const uint64_t left = deadline > now ? deadline - now : 0;
  return std::chrono::microseconds(std::max<uint64_t>(1, std::min(left, cap_ns) / 1000));
}

}  // namespace

Status tp_group_check_backend(std::string_view backend, int tp) {
#if !HEARTH_HAVE_NCCL
  if (tp > 1 && backend.starts_with("cuda")) {
    return make_error(ErrorCode::kUnsupported, "--tp {} on {}: GPU ranks talk over NCCL, and this build has none (the "
                      "CUDA toolkit it was built with lacks libnccl)", tp, backend);
  }
#endif
  (void)backend, (void)tp;
  return Status::ok();
}

int tp_group_cuda_device(std::string_view backend) {
  if (!backend.starts_with("cuda")) return -1;
  auto device = cuda_device_from_name(backend);
  return device.is_ok() ? *device : -1;
}

TpGroup::TpGroup(TpSegment segment, const TpGroupOptions& options)
    : segment_(std::move(segment)), options_(options), size_(segment_.tp_size()) {
  if (size_ == 1) {
    comm_ = make_single_rank_communicator();
    return;
  }
#if HEARTH_HAVE_NCCL
  if (options_.cuda_device >= 0) {
    nccl_ = true;
    auto nccl = make_nccl_communicator({.rank = options_.rank,
                                        .size = size_,
                                        .device = options_.cuda_device,
                                        .collective_timeout = options_.collective_timeout,
                                        .observe = [this](uint64_t epoch, WatchdogObservation& seen) {
                                          observe(epoch, seen);
                                        }});
    epoch_comm_ = nccl.get();
    comm_ = std::move(nccl);
    return;
  }
#endif
  HEARTH_CHECK(options_.cuda_device < 0) << "GPU ranks need NCCL (tp_group_check_backend refuses this)";
  auto shm = make_shm_communicator(*this);
  epoch_comm_ = shm.get();
  comm_ = std::move(shm);
}

void TpGroup::observe(uint64_t epoch, WatchdogObservation& seen) const {
  const TpHeader& h = segment_.header();
  seen.epoch_over = segment_.retired() || h.epoch.load(std::memory_order_acquire) != epoch ||
                    h.group_state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpGroupState::kBroken);
  for (int r = 0; r < size_ && seen.gone_rank < 0; ++r) {
    if (r != options_.rank && segment_.liveness(r, options_.rank_stale, seen.now_ns) != TpLiveness::kAlive) {
      seen.gone_rank = r;
    }
  }
}

TpGroup::~TpGroup() {
  leave(TpBreak::kStopped);
  segment_.unregister_rank(options_.rank);
}

bool TpGroup::active() const {
  if (!joined_) return false;
  const TpHeader& h = segment_.header();
  return h.epoch.load(std::memory_order_acquire) == epoch_ &&
         h.group_state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpGroupState::kActive);
}

void TpGroup::heartbeat() const { segment_.heartbeat(options_.rank); }

void TpGroup::note_step(uint64_t ns) const {
  TpRankEntry& e = segment_.rank(options_.rank);
  e.steps.fetch_add(1, std::memory_order_relaxed);
  e.step_ns.fetch_add(ns, std::memory_order_relaxed);
  e.last_step_ns.store(ns, std::memory_order_relaxed);
}

void TpGroup::note_cpus(uint64_t mask, uint32_t n_cpus, uint32_t threads) const {
  TpRankEntry& e = segment_.rank(options_.rank);
  e.cpu_mask.store(mask, std::memory_order_relaxed);
  e.n_cpus.store(n_cpus, std::memory_order_relaxed);
  e.threads.store(threads, std::memory_order_relaxed);
}

std::string TpGroup::broken_message() const {
  const TpHeader& h = segment_.header();
  const int about = h.broken_rank.load(std::memory_order_acquire);
  const uint32_t why = h.broken_why.load(std::memory_order_acquire);
  std::string who;
  if (about >= 0 && about < size_) {
    who = fmt::format(": rank {} (pid {})", about, segment_.rank(about).pid.load(std::memory_order_relaxed));
  }
  return fmt::format("tensor-parallel group epoch {} ended ({}{})", epoch_, tp_break_name(why), who);
}

Status TpGroup::break_epoch(TpBreak why, int about) {
  TpHeader& h = segment_.header();
  uint32_t state = h.group_state.load(std::memory_order_acquire);
  if (joined_ && h.epoch.load(std::memory_order_acquire) == epoch_ &&
      (state == static_cast<uint32_t>(TpGroupState::kActive) ||
       state == static_cast<uint32_t>(TpGroupState::kForming))) {
    h.broken_why.store(static_cast<uint32_t>(why), std::memory_order_relaxed);
    h.broken_rank.store(about, std::memory_order_relaxed);
    if (h.group_state.compare_exchange_strong(state, static_cast<uint32_t>(TpGroupState::kBroken),
                                              std::memory_order_acq_rel)) {
      HEARTH_LOG_WARN("rank {}: {}", options_.rank, broken_message());
    }
  }
  const std::string message = broken_message();
  joined_ = false;
  segment_.rank(options_.rank).state.store(static_cast<uint32_t>(TpRankState::kWaiting), std::memory_order_release);
  futex_signal(h.group_word);
  futex_wake(h.arrive);
  futex_signal(h.step_word);
  return make_error(ErrorCode::kUnavailable, "{}", message);
}

void TpGroup::leave(TpBreak why) {
  if (joined_) (void)break_epoch(why, options_.rank);
}

Status TpGroup::members_alive(uint64_t now) {
  last_member_check_ns_ = now;
  for (int r = 0; r < size_; ++r) {
    if (r == options_.rank) continue;
    const TpLiveness live = segment_.liveness(r, options_.rank_stale, now);
    if (live == TpLiveness::kGone) return break_epoch(TpBreak::kRankGone, r);
    if (live == TpLiveness::kSilent) return break_epoch(TpBreak::kRankSilent, r);
    // A restarted process in the entry of a member has not joined this epoch.
    const TpRankEntry& e = segment_.rank(r);
    if (e.epoch.load(std::memory_order_acquire) != epoch_ ||
        e.state.load(std::memory_order_acquire) != static_cast<uint32_t>(TpRankState::kJoined)) {
      return break_epoch(TpBreak::kRankGone, r);
    }
  }
  return Status::ok();
}

Status TpGroup::wait_check(uint64_t started_ns, bool idle) {
  if (segment_.retired()) {
    joined_ = false;
    return make_error(ErrorCode::kUnavailable, "the tp segment {} was replaced", segment_.path().string());
  }
  if (!joined_) return make_error(ErrorCode::kUnavailable, "{}", broken_message());
  const TpHeader& h = segment_.header();
  if (h.epoch.load(std::memory_order_acquire) != epoch_ ||
      h.group_state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpGroupState::kBroken)) {
    return break_epoch(TpBreak::kNone, -1);  // someone else ended it; leave
  }
  const uint64_t now = monotonic_ns();
  heartbeat();
  if (now - last_member_check_ns_ > kMemberCheckNs) HEARTH_RETURN_IF_ERROR(members_alive(now));
  if (!idle && now - started_ns > ns_of(options_.collective_timeout)) {
    HEARTH_LOG_ERROR("rank {}: a collective waited more than {} ms", options_.rank, options_.collective_timeout.count());
    return break_epoch(TpBreak::kTimeout, -1);
  }
  return Status::ok();
}

Status TpGroup::check_members() {
  if (!active()) {
    if (joined_) return break_epoch(TpBreak::kNone, -1);
    return make_error(ErrorCode::kUnavailable, "{}", broken_message());
  }
  const uint64_t now = monotonic_ns();
  if (now - last_member_check_ns_ <= kMemberCheckNs) return Status::ok();
  return members_alive(now);
}

Result<bool> TpGroup::form(std::chrono::milliseconds wait) {
  if (options_.rank != 0) return make_error(ErrorCode::kInternal, "only rank 0 forms a group");
  if (active()) return true;
  if (segment_.retired()) return make_error(ErrorCode::kUnavailable, "the tp segment was replaced");
  TpHeader& h = segment_.header();
  TpRankEntry& me = segment_.rank(0);
  joined_ = false;
  me.state.store(static_cast<uint32_t>(TpRankState::kWaiting), std::memory_order_release);
  const uint64_t deadline = monotonic_ns() + ns_of(wait);
  while (true) {
    heartbeat();
    const uint64_t now = monotonic_ns();
    bool all = true;
    for (int r = 1; r < size_ && all; ++r) {
      all = segment_.rank(r).state.load(std::memory_order_acquire) == static_cast<uint32_t>(TpRankState::kWaiting) &&
            segment_.liveness(r, options_.rank_stale, now) == TpLiveness::kAlive;
    }
    if (all) break;
    if (now >= deadline) return false;
    const uint32_t seen = h.group_word.load(std::memory_order_acquire);
    futex_wait(h.group_word, seen, sleep_for(now, deadline, 100 * kMs));
  }
  // A new epoch: counters from zero, no NCCL id (CPU ranks), then publish it.
  const uint64_t epoch = h.epoch.load(std::memory_order_acquire) + 1;
  h.arrive.store(0, std::memory_order_relaxed);
  h.sleepers.store(0, std::memory_order_relaxed);
  std::memset(h.nccl_id, 0, sizeof(h.nccl_id));
#if HEARTH_HAVE_NCCL
  if (nccl_) HEARTH_RETURN_IF_ERROR(nccl_unique_id(h.nccl_id));
#endif
  h.broken_why.store(static_cast<uint32_t>(TpBreak::kNone), std::memory_order_relaxed);
  h.broken_rank.store(-1, std::memory_order_relaxed);
  h.group_state.store(static_cast<uint32_t>(TpGroupState::kForming), std::memory_order_release);
  h.epoch.store(epoch, std::memory_order_release);
  epoch_ = epoch;
  joined_ = true;
  me.epoch.store(epoch, std::memory_order_relaxed);
  me.state.store(static_cast<uint32_t>(TpRankState::kJoined), std::memory_order_release);
  futex_signal(h.group_word);
  // NCCL's init waits for every member's: they form it as they join.
  if (epoch_comm_ != nullptr) {
    if (Status st = epoch_comm_->begin_epoch(epoch, h.nccl_id, options_.join_timeout); !st.is_ok()) {
      HEARTH_LOG_ERROR("rank 0: {}", st.message());
      (void)break_epoch(TpBreak::kJoinTimeout, -1);
      return false;
    }
  }
  // Every rank joins, or the epoch ends.
  const uint64_t join_deadline = monotonic_ns() + ns_of(options_.join_timeout);
  for (int r = 1; r < size_; ++r) {
    const TpRankEntry& e = segment_.rank(r);
    while (e.epoch.load(std::memory_order_acquire) != epoch ||
           e.state.load(std::memory_order_acquire) != static_cast<uint32_t>(TpRankState::kJoined)) {
      const uint64_t now = monotonic_ns();
      heartbeat();
      if (h.group_state.load(std::memory_order_acquire) != static_cast<uint32_t>(TpGroupState::kForming)) {
        (void)break_epoch(TpBreak::kNone, -1);
        return false;
      }
      if (now >= join_deadline || segment_.liveness(r, options_.rank_stale, now) != TpLiveness::kAlive) {
        (void)break_epoch(TpBreak::kJoinTimeout, r);
        return false;
      }
      const uint32_t seen = h.group_word.load(std::memory_order_acquire);
      futex_wait(h.group_word, seen, sleep_for(now, join_deadline, 20 * kMs));
    }
  }
  if (h.formed.fetch_add(1, std::memory_order_relaxed) > 0) h.restarts.fetch_add(1, std::memory_order_relaxed);
  uint32_t forming = static_cast<uint32_t>(TpGroupState::kForming);
  if (!h.group_state.compare_exchange_strong(forming, static_cast<uint32_t>(TpGroupState::kActive),
                                             std::memory_order_acq_rel)) {
    (void)break_epoch(TpBreak::kNone, -1);
    return false;
  }
  futex_signal(h.group_word);
  last_member_check_ns_ = monotonic_ns();
  return true;
}

Result<bool> TpGroup::join(std::chrono::milliseconds wait) {
  if (options_.rank == 0) return make_error(ErrorCode::kInternal, "rank 0 forms the group, it does not join it");
  TpHeader& h = segment_.header();
  if (joined_ && h.epoch.load(std::memory_order_acquire) == epoch_ &&
      h.group_state.load(std::memory_order_acquire) != static_cast<uint32_t>(TpGroupState::kBroken)) {
    return true;  // a member already (the epoch may still be forming)
  }
  TpRankEntry& me = segment_.rank(options_.rank);
  joined_ = false;
  me.state.store(static_cast<uint32_t>(TpRankState::kWaiting), std::memory_order_release);
  const uint64_t deadline = monotonic_ns() + ns_of(wait);
  while (true) {
    if (segment_.retired()) {
      return make_error(ErrorCode::kUnavailable, "the tp segment {} was replaced", segment_.path().string());
    }
    heartbeat();
    const uint64_t epoch = h.epoch.load(std::memory_order_acquire);
    const uint32_t state = h.group_state.load(std::memory_order_acquire);
    if (state == static_cast<uint32_t>(TpGroupState::kForming) && epoch > epoch_) {
      // The epoch's NCCL id, read as a seqlock: rank 0 rewrites it only for a later epoch,
      // after this one ended, so the copy is this epoch's when the epoch and its state
      // are unchanged after it.
      unsigned char id[kNcclIdBytes];
      std::memcpy(id, h.nccl_id, sizeof(id));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (h.epoch.load(std::memory_order_acquire) != epoch ||
          h.group_state.load(std::memory_order_acquire) != static_cast<uint32_t>(TpGroupState::kForming)) {
        continue;
      }
      epoch_ = epoch;
      joined_ = true;
      if (!nccl_ && epoch_comm_ != nullptr) (void)epoch_comm_->begin_epoch(epoch, id, options_.join_timeout);
      last_seq_ = h.step_seq.load(std::memory_order_acquire);
      me.step_taken.store(last_seq_, std::memory_order_relaxed);
      me.epoch.store(epoch, std::memory_order_relaxed);
      me.state.store(static_cast<uint32_t>(TpRankState::kJoined), std::memory_order_release);
      futex_signal(h.group_word);
      if (nccl_) {
        if (Status st = epoch_comm_->begin_epoch(epoch, id, options_.join_timeout); !st.is_ok()) {
          HEARTH_LOG_ERROR("rank {}: {}", options_.rank, st.message());
          (void)break_epoch(TpBreak::kJoinTimeout, options_.rank);
          return false;
        }
      }
      last_member_check_ns_ = monotonic_ns();
      return true;
    }
    const uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    const uint32_t seen = h.group_word.load(std::memory_order_acquire);
    futex_wait(h.group_word, seen, sleep_for(now, deadline, 100 * kMs));
  }
}

Status TpGroup::publish(const ModelInput& input) {
  if (size_ == 1) return Status::ok();
  if (!active()) return make_error(ErrorCode::kUnavailable, "{}", broken_message());
  TpHeader& h = segment_.header();
  input.serialize(bytes_);
  if (bytes_.size() > h.step_capacity) {
    return make_error(ErrorCode::kInternal, "a step input of {} bytes exceeds the tp segment's {}", bytes_.size(),
                      h.step_capacity);
  }
  const uint64_t seq = h.step_seq.load(std::memory_order_relaxed);  // rank 0 is its only writer
  // Normally long done: a rank takes a step before its first collective of it.
  const uint64_t started = monotonic_ns();
  for (int r = 1; r < size_; ++r) {
    while (segment_.rank(r).step_taken.load(std::memory_order_acquire) < seq) {
      HEARTH_RETURN_IF_ERROR(wait_check(started, /*idle=*/false));
      cpu_relax();
    }
  }
  std::memcpy(segment_.step_area(), bytes_.data(), bytes_.size());
  h.step_bytes.store(bytes_.size(), std::memory_order_relaxed);
  h.step_seq.store(seq + 1, std::memory_order_release);
  futex_signal(h.step_word);
  return Status::ok();
}

Result<bool> TpGroup::next_step(ModelInput& out, std::chrono::milliseconds wait) {
  if (!active() && !joined_) return make_error(ErrorCode::kUnavailable, "{}", broken_message());
  TpHeader& h = segment_.header();
  const uint64_t started = monotonic_ns();
  const uint64_t deadline = started + ns_of(wait);
  while (true) {
    const uint64_t seq = h.step_seq.load(std::memory_order_acquire);
    if (seq > last_seq_) {
      const uint64_t n = h.step_bytes.load(std::memory_order_relaxed);
      if (n > h.step_capacity) return break_epoch(TpBreak::kNone, -1);
      bytes_.resize(n);
      std::memcpy(bytes_.data(), segment_.step_area(), n);
      last_seq_ = seq;
      segment_.rank(options_.rank).step_taken.store(seq, std::memory_order_release);
      if (Status st = ModelInput::deserialize(bytes_, out); !st.is_ok()) {
        HEARTH_LOG_ERROR("rank {}: step {} from rank 0 is unreadable: {}", options_.rank, seq, st.message());
        (void)break_epoch(TpBreak::kNone, -1);
        return st;
      }
      return true;
    }
    HEARTH_RETURN_IF_ERROR(wait_check(started, /*idle=*/true));
    const uint64_t now = monotonic_ns();
    if (now >= deadline) return false;
    if (now - started < kSpinBeforeSleepNs) {
      cpu_relax();
      continue;
    }
    const uint32_t seen = h.step_word.load(std::memory_order_acquire);
    if (h.step_seq.load(std::memory_order_acquire) > last_seq_) continue;
    futex_wait(h.step_word, seen, sleep_for(now, deadline, 100 * kMs));
  }
}

}  // namespace hearth
