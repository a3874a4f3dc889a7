#include "engine/tp/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/process.h"

namespace hearth {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(50);
constexpr auto kPollPeriod = std::chrono::microseconds(50);
constexpr size_t kMaxInFlight = 256;  // collectives enqueued and not yet seen complete

Status nccl_error(ncclResult_t r, std::string_view what) {
  return make_error(ErrorCode::kUnavailable, "NCCL {}: {}", what, ncclGetErrorString(r));
}

// Every member function takes mu_, which guards all state below it; polls for NCCL's
// progress release it between rounds so that the watchdog can abort what they wait for.
class NcclCommunicator final : public EpochCommunicator {
 public:
  explicit NcclCommunicator(NcclOptions options) : o_(std::move(options)) {
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    std::lock_guard lock(mu_);
    drop_comm(/*abort=*/in_flight_ > 0);
    for (cudaEvent_t e : events_) {
      if (e != nullptr) cudaEventDestroy(e);
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  int rank() const override { return o_.rank; }
  int size() const override { return o_.size; }

  Status begin_epoch(uint64_t epoch, std::span<const unsigned char> nccl_id,
                     std::chrono::milliseconds timeout) override {
    if (nccl_id.size() != sizeof(ncclUniqueId)) {
      return make_error(ErrorCode::kInternal, "an NCCL id is {} bytes, not {}", sizeof(ncclUniqueId), nccl_id.size());
    }
    ncclUniqueId id;
    std::memcpy(&id, nccl_id.data(), sizeof(id));
    std::unique_lock lock(mu_);
    drop_comm(/*abort=*/true);  // the last epoch's, whatever state it was left in
    if (cudaSetDevice(o_.device) != cudaSuccess) {
      return make_error(ErrorCode::kUnavailable, "NCCL: cannot use CUDA device {}", o_.device);
    }
    if (events_[0] == nullptr) {
      for (cudaEvent_t& e : events_) {
        if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
          return make_error(ErrorCode::kResourceExhausted, "NCCL: cannot create the watchdog's events");
        }
      }
    }
    if (scratch_ == nullptr && cudaMalloc(&scratch_, sizeof(float)) != cudaSuccess) {
      return make_error(ErrorCode::kResourceExhausted, "NCCL: cannot allocate the barrier's scratch float");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and collectives return at once; completion is polled
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, o_.size, id, o_.rank, &config);
    const auto deadline = Clock::now() + timeout;
    while (r == ncclInProgress && comm != nullptr) {
      if (Clock::now() > deadline) {
        ncclCommAbort(comm);
        return make_error(ErrorCode::kUnavailable, "NCCL: rank {} of {} could not form epoch {}'s communicator within "
                          "{} ms (a peer did not join)", o_.rank, o_.size, epoch, timeout.count());
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
      ncclCommGetAsyncError(comm, &r);
    }
    if (r != ncclSuccess || comm == nullptr) {
      if (comm != nullptr) ncclCommAbort(comm);
      return nccl_error(r, fmt::format("forming epoch {}'s communicator", epoch));
    }
    comm_ = comm;
    epoch_ = epoch;
    aborted_ = false;
    HEARTH_LOG_INFO("rank {} of {}: NCCL {}.{}.{} communicator for epoch {} on CUDA device {}", o_.rank, o_.size,
                    NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, epoch, o_.device);
    return Status::ok();
  }

  Status all_reduce_sum(float* data, int64_t n, DeviceQueue queue) override {
    return enqueue("all-reduce", static_cast<cudaStream_t>(queue.handle), [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm, s);
    });
  }

  Status broadcast(void* data, size_t bytes, int root, DeviceQueue queue) override {
    if (root < 0 || root >= o_.size) {
      return make_error(ErrorCode::kInvalidArgument, "broadcast from rank {} in a group of {}", root, o_.size);
    }
    return enqueue("broadcast", static_cast<cudaStream_t>(queue.handle), [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, s);
    });
  }

  // All of this rank's device work done, then an all-reduce of one float, waited for.
  Status barrier() override {
    if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
      return make_error(ErrorCode::kUnavailable, "NCCL barrier: {}", cudaGetErrorString(e));
    }
    HEARTH_RETURN_IF_ERROR(enqueue("barrier", nullptr, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm, s);
    }));
    std::unique_lock lock(mu_);
    while (in_flight_ > 0) {
      if (aborted_) return make_error(ErrorCode::kUnavailable, "NCCL barrier aborted by the watchdog");
      retire_completed();
      lock.unlock();
      std::this_thread::sleep_for(kPollPeriod);
      lock.lock();
    }
    return Status::ok();
  }

 private:
  template <typename F>
  Status enqueue(const char* what, cudaStream_t stream, F&& call) {
    std::unique_lock lock(mu_);
    auto gone = [&] {
      return make_error(ErrorCode::kUnavailable, "NCCL {}: rank {} has no communicator for this epoch{}", what, o_.rank,
                        aborted_ ? " (the watchdog aborted it)" : "");
    };
    if (comm_ == nullptr || aborted_) return gone();
    // A full ring: wait for the oldest collective (the watchdog aborts one that is stuck).
    while (in_flight_ == kMaxInFlight) {
      retire_completed();
      if (in_flight_ < kMaxInFlight) break;
      lock.unlock();
      std::this_thread::sleep_for(kPollPeriod);
      lock.lock();
      if (comm_ == nullptr || aborted_) return gone();
    }
    enqueuing_since_ = monotonic_ns();  // the watchdog times this too: enqueuing may wait for peers
    ncclResult_t r = call(comm_, stream);
    // A non-blocking communicator may still be enqueuing (connecting to its peers, say):
    // wait for that, not for the collective itself, which runs on the stream.
    while (r == ncclInProgress) {
      lock.unlock();
      std::this_thread::sleep_for(kPollPeriod);
      lock.lock();
      if (comm_ == nullptr || aborted_) {
        enqueuing_since_ = 0;
        return gone();
      }
      ncclCommGetAsyncError(comm_, &r);
    }
    enqueuing_since_ = 0;
    if (r != ncclSuccess) {
      aborted_ = true;
      return nccl_error(r, what);
    }
    const size_t slot = (first_ + in_flight_) % kMaxInFlight;
    if (cudaEventRecord(events_[slot], stream) != cudaSuccess) {
      return make_error(ErrorCode::kUnavailable, "NCCL {}: cannot record the watchdog's event", what);
    }
    enqueued_ns_[slot] = monotonic_ns();
    ++in_flight_;
    return Status::ok();
  }

  // Forgets the collectives that have completed, oldest first.
  void retire_completed() {
    while (in_flight_ > 0 && cudaEventQuery(events_[first_]) == cudaSuccess) {
      first_ = (first_ + 1) % kMaxInFlight;
      --in_flight_;
    }
  }

  // Ends the communicator of the last epoch: abort when a collective may still run.
  void drop_comm(bool abort) {
    if (comm_ != nullptr) {
      if (abort || aborted_) {
        ncclCommAbort(comm_);
      } else {
        ncclCommDestroy(comm_);
      }
    }
    comm_ = nullptr;
    first_ = 0;
    in_flight_ = 0;
    enqueuing_since_ = 0;
  }

  void watch() {
    cudaSetDevice(o_.device);  // its event queries use this rank's context, not device 0's
    std::unique_lock lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, kWatchdogPeriod);
      if (stop_ || comm_ == nullptr || aborted_) continue;
      retire_completed();
      WatchdogObservation seen;
      seen.now_ns = monotonic_ns();
      seen.pending_since_ns = in_flight_ > 0 ? enqueued_ns_[first_] : 0;
      if (enqueuing_since_ != 0 && (seen.pending_since_ns == 0 || enqueuing_since_ < seen.pending_since_ns)) {
        seen.pending_since_ns = enqueuing_since_;
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      seen.async_error = async != ncclSuccess && async != ncclInProgress;
      if (o_.observe) o_.observe(epoch_, seen);
      const WatchdogVerdict v = collective_watchdog(seen, o_.collective_timeout);
      if (v == WatchdogVerdict::kWait) continue;
      HEARTH_LOG_ERROR("rank {}: aborting epoch {}'s NCCL communicator: {}{}", o_.rank, epoch_,
                       watchdog_verdict_name(v),
                       seen.gone_rank >= 0 ? fmt::format(" (rank {})", seen.gone_rank) : std::string());
      ncclCommAbort(comm_);
      comm_ = nullptr;
      aborted_ = true;
      first_ = 0;
      in_flight_ = 0;
      enqueuing_since_ = 0;
    }
  }

  NcclOptions o_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  ncclComm_t comm_ = nullptr;
  uint64_t epoch_ = 0;
  bool aborted_ = false;
  // The collectives in flight: a ring of events recorded after each, with its enqueue time.
  std::array<cudaEvent_t, kMaxInFlight> events_{};
  std::array<uint64_t, kMaxInFlight> enqueued_ns_{};
  size_t first_ = 0;
  size_t in_flight_ = 0;
  uint64_t enqueuing_since_ = 0;  // a collective NCCL is still enqueuing, or 0
  float* scratch_ = nullptr;
  std::thread watchdog_;
};

}  // namespace

Status nccl_unique_id(std::span<unsigned char> out) {
  if (out.size() != sizeof(ncclUniqueId)) {
    return make_error(ErrorCode::kInternal, "an NCCL id is {} bytes, not {}", sizeof(ncclUniqueId), out.size());
  }
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) return nccl_error(r, "creating a unique id");
  std::memcpy(out.data(), &id, sizeof(id));
  return Status::ok();
}

std::unique_ptr<EpochCommunicator> make_nccl_communicator(NcclOptions options) {
  return std::make_unique<NcclCommunicator>(std::move(options));
}

}  // namespace hearth
