// NCCL between processes over POSIX shared memory. A unique id names a segment
// (/dev/shm/hearth-emu-nccl-<hex>) that the first rank to join creates; each rank writes
// its pid there, and the communicator is formed when every rank has (the last to join
// removes the name). A collective runs on its stream: each rank copies its part into its
// slot, waits for every rank to arrive, combines the slots in rank order (so every rank
// gets the same bits), then waits for every rank to leave before the slots are reused.
// A rank waiting on its peers stops when its communicator is aborted, when a peer aborts,
// or when a peer's process is gone (the communicator's async error says which).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/emu/internal.h"
#include "nccl.h"

namespace hearth::emu {
namespace {

constexpr int kMaxRanks = 8;
constexpr size_t kSlotBytes = 1u << 20;  // a collective moves this much per rank at a time
constexpr char kIdMagic[8] = {'h', 'e', 'm', 'u', 'n', 'c', 'c', 'l'};

struct Segment {
  std::atomic<int32_t> pid[kMaxRanks];
  std::atomic<int32_t> aborted[kMaxRanks];
  std::atomic<uint64_t> arrived[kMaxRanks];
  std::atomic<uint64_t> left[kMaxRanks];
  alignas(64) std::byte slot[kMaxRanks][kSlotBytes];
};
static_assert(std::atomic<int32_t>::is_always_lock_free && std::atomic<uint64_t>::is_always_lock_free);

struct Id {
  char magic[8];
  char name[64];
};

}  // namespace
}  // namespace hearth::emu

struct ncclComm {
  int rank = 0, nranks = 0;
  std::string name;
  hearth::emu::Segment* seg = nullptr;
  bool unlinked = false;
  std::atomic<bool> aborted{false};
  std::atomic<int> async{ncclSuccess};  // the first error a collective met
  uint64_t seq = 0;                     // collectives enqueued (each chunk is one)

  ~ncclComm() {
    if (seg != nullptr) munmap(seg, sizeof(hearth::emu::Segment));
  }
};

namespace hearth::emu {
namespace {

using Comm = std::shared_ptr<ncclComm>;

// The communicators handed out: the handle is a raw pointer, the stream's work keeps a
// reference of its own, so that an abort or destroy does not free what a queued
// collective still uses.
struct Registry {
  std::mutex mu;
  std::vector<Comm> live;
  Comm find(ncclComm* c) {
    std::lock_guard lock(mu);
    for (const Comm& p : live) {
      if (p.get() == c) return p;
    }
    return nullptr;
  }
  void drop(ncclComm* c) {
    std::lock_guard lock(mu);
    std::erase_if(live, [c](const Comm& p) { return p.get() == c; });
  }
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

bool all_joined(const ncclComm& c) {
  for (int r = 0; r < c.nranks; ++r) {
    if (c.seg->pid[r].load(std::memory_order_acquire) == 0) return false;
  }
  return true;
}

void unlink_once(ncclComm& c) {
  if (!c.unlinked) {
    shm_unlink(c.name.c_str());
    c.unlinked = true;
  }
}

// Waits until every rank's counter in `which` reaches `seq`; false (with the reason in
// c.async) when this communicator or a peer is aborted, or a peer's process is gone.
bool wait_all(ncclComm& c, std::atomic<uint64_t>* which, uint64_t seq) {
  auto last_check = std::chrono::steady_clock::now();
  for (int spins = 0;; ++spins) {
    bool all = true;
    for (int r = 0; r < c.nranks && all; ++r) all = which[r].load(std::memory_order_acquire) >= seq;
    if (all) return true;
    if (c.aborted.load(std::memory_order_acquire)) return false;
    for (int r = 0; r < c.nranks; ++r) {
      if (c.seg->aborted[r].load(std::memory_order_acquire) != 0) {
        c.async.store(ncclRemoteError);
        return false;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - last_check > std::chrono::milliseconds(100)) {
      last_check = now;
      for (int r = 0; r < c.nranks; ++r) {
        const pid_t pid = c.seg->pid[r].load(std::memory_order_acquire);
        if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
          c.async.store(ncclRemoteError);
          return false;
        }
      }
    }
    if (spins < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

size_t type_bytes(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
  }
  return 0;
}

// One collective over `bytes` of `send` (all-reduce of floats, or a broadcast from
// `root`), a slot's worth at a time. Runs on the stream's thread.
void run_collective(ncclComm& c, const std::byte* send, std::byte* recv, size_t bytes, bool reduce, int root,
                    uint64_t first_seq) {
  const uint64_t chunks = bytes == 0 ? 1 : (bytes + kSlotBytes - 1) / kSlotBytes;
  for (uint64_t k = 0; k < chunks; ++k) {
    const uint64_t seq = first_seq + k;
    const size_t done = static_cast<size_t>(k) * kSlotBytes;
    const size_t n = std::min(kSlotBytes, bytes - done);
    if (reduce || c.rank == root) std::memcpy(c.seg->slot[c.rank], send + done, n);
    c.seg->arrived[c.rank].store(seq, std::memory_order_release);
    if (!wait_all(c, c.seg->arrived, seq)) return;
    if (reduce) {
      const size_t floats = n / sizeof(float);
      std::vector<float> sum(floats, 0.0f);
      for (int r = 0; r < c.nranks; ++r) {
        const auto* part = reinterpret_cast<const float*>(c.seg->slot[r]);
        for (size_t i = 0; i < floats; ++i) sum[i] += part[i];
      }
      std::memcpy(recv + done, sum.data(), floats * sizeof(float));
    } else if (c.rank != root) {
      std::memcpy(recv + done, c.seg->slot[root], n);
    } else if (recv != send) {
      std::memmove(recv + done, send + done, n);
    }
    c.seg->left[c.rank].store(seq, std::memory_order_release);
    if (!wait_all(c, c.seg->left, seq)) return;
  }
}

ncclResult_t enqueue_collective(ncclComm_t handle, const void* send, void* recv, size_t bytes, bool reduce, int root,
                                cudaStream_t stream) {
  Comm c = registry().find(handle);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->aborted.load()) return ncclInvalidUsage;
  if (!all_joined(*c)) return ncclInvalidUsage;
  if (const int e = c->async.load(); e != ncclSuccess) return static_cast<ncclResult_t>(e);
  const uint64_t chunks = bytes == 0 ? 1 : (bytes + kSlotBytes - 1) / kSlotBytes;
  const uint64_t first = c->seq + 1;
  c->seq += chunks;
  const cudaError_t e = enqueue(stream, [c, send, recv, bytes, reduce, root, first] {
    if (!c->aborted.load()) {
      run_collective(*c, static_cast<const std::byte*>(send), static_cast<std::byte*>(recv), bytes, reduce, root,
                     first);
    }
  });
  return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

}  // namespace
}  // namespace hearth::emu

using namespace hearth::emu;  // NOLINT: NCCL's C-style entry points below

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
  }
  return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::random_device rd;
  Id v{};
  std::memcpy(v.magic, kIdMagic, sizeof kIdMagic);
  std::snprintf(v.name, sizeof v.name, "/hearth-emu-nccl-%08x%08x%08x", rd(), rd(), rd());
  *id = {};
  std::memcpy(id->internal, &v, sizeof v);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (out == nullptr) return ncclInvalidArgument;
  *out = nullptr;
  Id v{};
  std::memcpy(&v, id.internal, sizeof v);
  if (std::memcmp(v.magic, kIdMagic, sizeof kIdMagic) != 0 || v.name[sizeof v.name - 1] != '\0') {
    return ncclInvalidArgument;
  }
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  const int fd = shm_open(v.name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ncclSystemError;
  // Every rank sizes it alike; a new segment's bytes are zero, which is its empty state.
  void* m = MAP_FAILED;
  if (ftruncate(fd, sizeof(Segment)) == 0) {
    m = mmap(nullptr, sizeof(Segment), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (m == MAP_FAILED) return ncclSystemError;
  auto c = std::make_shared<ncclComm>();
  c->rank = rank;
  c->nranks = nranks;
  c->name = v.name;
  c->seg = static_cast<Segment*>(m);
  int32_t expected = 0;
  if (!c->seg->pid[rank].compare_exchange_strong(expected, static_cast<int32_t>(getpid()))) {
    return ncclInvalidUsage;  // that rank has joined already
  }
  if (all_joined(*c)) unlink_once(*c);
  {
    std::lock_guard lock(registry().mu);
    registry().live.push_back(c);
  }
  *out = c.get();
  const bool blocking = config == nullptr || config->blocking != 0;
  if (!blocking) return all_joined(*c) ? ncclSuccess : ncclInProgress;
  while (!all_joined(*c)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t handle, ncclResult_t* async_error) {
  if (async_error == nullptr) return ncclInvalidArgument;
  Comm c = registry().find(handle);
  if (c == nullptr) return ncclInvalidArgument;
  if (const int e = c->async.load(); e != ncclSuccess) {
    *async_error = static_cast<ncclResult_t>(e);
  } else if (!all_joined(*c)) {
    *async_error = ncclInProgress;
  } else {
    unlink_once(*c);
    *async_error = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t handle) {
  Comm c = registry().find(handle);
  if (c == nullptr) return ncclInvalidArgument;
  c->aborted.store(true);
  c->seg->aborted[c->rank].store(1, std::memory_order_release);
  unlink_once(*c);
  registry().drop(handle);  // a queued collective keeps its own reference
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t handle) {
  Comm c = registry().find(handle);
  if (c == nullptr) return ncclInvalidArgument;
  unlink_once(*c);
  registry().drop(handle);
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  if (type != ncclFloat32 || op != ncclSum) return ncclInvalidArgument;  // what hearth reduces
  return enqueue_collective(comm, send, recv, count * type_bytes(type), true, 0, stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                           cudaStream_t stream) {
  Comm c = registry().find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (root < 0 || root >= c->nranks || type_bytes(type) == 0) return ncclInvalidArgument;
  return enqueue_collective(comm, send, recv, count * type_bytes(type), false, root, stream);
}
