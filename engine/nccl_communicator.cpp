#include "engine/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"

namespace hearth {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(50);

uint64_t monotonic_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

Status nccl_error(ncclResult_t r, std::string_view what) {
  return make_error(ErrorCode::kUnavailable, "NCCL {}: {}", what, ncclGetErrorString(r));
}

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
    drop_comm(/*abort=*/pending_since_.load() != 0);
    if (event_ != nullptr) cudaEventDestroy(event_);
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
    if (event_ == nullptr && cudaEventCreateWithFlags(&event_, cudaEventDisableTiming) != cudaSuccess) {
      return make_error(ErrorCode::kResourceExhausted, "NCCL: cannot create the watchdog's event");
    }
    if (scratch_ == nullptr && cudaMalloc(&scratch_, sizeof(float)) != cudaSuccess) {
      return make_error(ErrorCode::kResourceExhausted, "NCCL: cannot allocate the barrier's scratch float");
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // init and collectives return at once; completion is polled
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRankConfig(&comm, o_.size, id, o_.rank, &config);
    const auto deadline = Clock::now() + timeout;
    while (r == ncclInProgress || r == ncclSuccess) {
      ncclResult_t state = ncclSuccess;
      if (comm == nullptr) break;
      ncclCommGetAsyncError(comm, &state);
      if (state != ncclInProgress) {
        r = state;
        break;
      }
      if (Clock::now() > deadline) {
        ncclCommAbort(comm);
        return make_error(ErrorCode::kUnavailable, "NCCL: rank {} of {} could not form epoch {}'s communicator within "
                          "{} ms (a peer did not join)", o_.rank, o_.size, epoch, timeout.count());
      }
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      lock.lock();
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
    return enqueue("all-reduce", queue, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(data, data, static_cast<size_t>(n), ncclFloat, ncclSum, comm, s);
    });
  }

  Status broadcast(void* data, size_t bytes, int root, DeviceQueue queue) override {
    if (root < 0 || root >= o_.size) {
      return make_error(ErrorCode::kInvalidArgument, "broadcast from rank {} in a group of {}", root, o_.size);
    }
    return enqueue("broadcast", queue, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm, s);
    });
  }

  // An all-reduce of one float on the default stream, waited for.
  Status barrier() override {
    HEARTH_RETURN_IF_ERROR(enqueue("barrier", DeviceQueue{}, [&](ncclComm_t comm, cudaStream_t s) {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm, s);
    }));
    while (true) {
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaSuccess) return Status::ok();
      if (e != cudaErrorNotReady) return make_error(ErrorCode::kUnavailable, "NCCL barrier: {}", cudaGetErrorString(e));
      {
        std::lock_guard lock(mu_);
        if (aborted_) return make_error(ErrorCode::kUnavailable, "NCCL barrier aborted by the watchdog");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  template <typename F>
  Status enqueue(const char* what, DeviceQueue queue, F&& call) {
    std::lock_guard lock(mu_);
    if (comm_ == nullptr || aborted_) {
      return make_error(ErrorCode::kUnavailable, "NCCL {}: rank {} has no communicator for this epoch{}", what,
                        o_.rank, aborted_ ? " (the watchdog aborted it)" : "");
    }
    auto stream = static_cast<cudaStream_t>(queue.handle);
    ncclResult_t r = call(comm_, stream);
    // A non-blocking communicator may still be enqueuing: wait for that (not for the
    // collective itself, which runs on the stream).
    while (r == ncclInProgress) {
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) {
      aborted_ = true;
      return nccl_error(r, what);
    }
    if (cudaEventRecord(event_, stream) != cudaSuccess) {
      return make_error(ErrorCode::kUnavailable, "NCCL {}: cannot record the watchdog's event", what);
    }
    uint64_t none = 0;
    pending_since_.compare_exchange_strong(none, monotonic_ns());
    return Status::ok();
  }

  // Ends the communicator of the last epoch: abort when a collective may still run.
  void drop_comm(bool abort) {
    if (comm_ == nullptr) return;
    if (abort || aborted_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    comm_ = nullptr;
    pending_since_.store(0);
  }

  void watch() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      wake_.wait_for(lock, kWatchdogPeriod);
      if (stop_ || comm_ == nullptr || aborted_) continue;
      WatchdogObservation seen;
      seen.now_ns = monotonic_ns();
      if (pending_since_.load() != 0 && cudaEventQuery(event_) == cudaSuccess) pending_since_.store(0);
      seen.pending_since_ns = pending_since_.load();
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
    }
  }

  NcclOptions o_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  ncclComm_t comm_ = nullptr;
  uint64_t epoch_ = 0;
  bool aborted_ = false;
  cudaEvent_t event_ = nullptr;
  float* scratch_ = nullptr;
  std::atomic<uint64_t> pending_since_{0};
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
