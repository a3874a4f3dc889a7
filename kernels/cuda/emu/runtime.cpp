// The CUDA runtime API on the CPU: emulated devices (HEARTH_EMU_DEVICES, an sm_90 part
// each with HEARTH_EMU_MEMORY of memory), device and pinned memory, streams that run
// their work in order on a host thread of their own, events, copies, legacy IPC handles
// that really cross processes, and the errors CUDA gives (a launch's own, not sticky; a
// kernel's fault, sticky for its device).
//
// Device memory is host memory the runtime keeps a register of, so a copy in the wrong
// direction, or past an allocation's end, fails as it would on a GPU. An allocation under
// 64 KiB comes from the C heap (AddressSanitizer watches its end); a larger one is a
// memfd mapped with a guard page after its last page (an IPC handle can name it).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda_runtime_api.h"
#include "kernels/cuda/emu/internal.h"

struct CUstream_st {
  int device = 0;
  bool blocking = true;  // synchronizes with the legacy default stream
  bool legacy = false;   // the legacy default stream itself
  std::mutex mu;
  std::condition_variable work, idle;
  std::deque<std::function<void()>> queue;
  uint64_t submitted = 0, completed = 0;
  bool stop = false;
  std::atomic<uint64_t> launches{0};
  std::thread worker;
};

struct CUevent_st {
  std::mutex mu;
  CUstream_st* stream = nullptr;
  uint64_t seq = 0;  // complete once the stream has completed this many ops
};

namespace hearth::emu {
namespace {

constexpr size_t kDefaultMemory = size_t{8} << 30;
constexpr size_t kHeapLimit = 64u << 10;  // smaller allocations come from the C heap
constexpr size_t kAlignment = 256;

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// "256MiB", "8GiB", "1048576": bytes, or 0 when it is not a size.
size_t parse_size(const char* text) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || v <= 0) return 0;
  std::string unit(end);
  double scale = 1;
  if (unit == "KiB" || unit == "K" || unit == "k") {
    scale = 1024.0;
  } else if (unit == "MiB" || unit == "M") {
    scale = 1024.0 * 1024;
  } else if (unit == "GiB" || unit == "G") {
    scale = 1024.0 * 1024 * 1024;
  } else if (!unit.empty() && unit != "B") {
    return 0;
  }
  return static_cast<size_t>(v * scale);
}

struct Config {
  int devices = 1;
  size_t memory = kDefaultMemory;
  cudaError_t init_error = cudaSuccess;
};

const Config& config() {
  static const Config config = [] {
    Config c;
    if (const char* d = std::getenv("HEARTH_EMU_DEVICES"); d != nullptr && *d != '\0') {
      char* end = nullptr;
      const long n = std::strtol(d, &end, 10);
      if (*end != '\0' || n < 0 || n > 16) {
        std::fprintf(stderr, "hearth-emu: HEARTH_EMU_DEVICES=%s is not a number of devices from 0 to 16\n", d);
        c.init_error = cudaErrorInitializationError;
      } else {
        c.devices = static_cast<int>(n);
      }
    }
    if (const char* m = std::getenv("HEARTH_EMU_MEMORY"); m != nullptr && *m != '\0') {
      c.memory = parse_size(m);
      if (c.memory == 0) {
        std::fprintf(stderr, "hearth-emu: HEARTH_EMU_MEMORY=%s is not a size (write it as 256MiB, 8GiB or bytes)\n", m);
        c.init_error = cudaErrorInitializationError;
      }
    }
    // Each allocation of 64 KiB or more, and each VMM allocation, holds an fd.
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
      files.rlim_cur = files.rlim_max;
      setrlimit(RLIMIT_NOFILE, &files);
    }
    return c;
  }();
  return config;
}

enum class Kind { kHeap, kMapped, kPinned, kRegistered, kImported, kVmm };

struct Allocation {
  size_t bytes = 0;
  int device = 0;
  Kind kind = Kind::kHeap;
  int fd = -1;               // kMapped: the memfd an IPC handle names
  void* map = nullptr;       // kMapped, kImported: the mapping, guard page included
  size_t map_bytes = 0;
};

struct Device {
  std::atomic<int> sticky{cudaSuccess};
  std::mutex mu;  // guards used, legacy and streams
  size_t used = 0;
  CUstream_st* legacy = nullptr;
  std::vector<CUstream_st*> streams;
};

struct State {
  std::mutex mu;  // guards allocations and retired
  std::map<uintptr_t, Allocation> allocations;
  // Destroyed streams, kept: an event recorded on one may still be asked about, and a
  // thread may still be waiting on it, as CUDA allows.
  std::vector<CUstream_st*> retired;
  std::unique_ptr<Device[]> devices;
  State() : devices(new Device[16]) {}
};

State& state() {
  static State* s = new State;  // never destroyed: stream threads may outlive static destruction
  return *s;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last = cudaSuccess;

Device& device(int d) { return state().devices[static_cast<size_t>(d)]; }

void worker(CUstream_st* s) {
  std::unique_lock lock(s->mu);
  for (;;) {
    s->work.wait(lock, [s] { return s->stop || !s->queue.empty(); });
    if (s->queue.empty()) return;
    std::function<void()> op = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    if (sticky_error(s->device) == cudaSuccess) op();
    op = nullptr;
    lock.lock();
    ++s->completed;
    s->idle.notify_all();
  }
}

CUstream_st* new_stream(int dev, bool blocking, bool legacy) {
  auto* s = new CUstream_st;
  s->device = dev;
  s->blocking = blocking;
  s->legacy = legacy;
  s->worker = std::thread(worker, s);
  return s;
}

CUstream_st* legacy_stream(int dev) {
  Device& d = device(dev);
  std::lock_guard lock(d.mu);
  if (d.legacy == nullptr) d.legacy = new_stream(dev, true, true);
  return d.legacy;
}

void wait_idle(CUstream_st* s) {
  std::unique_lock lock(s->mu);
  s->idle.wait(lock, [s] { return s->completed == s->submitted; });
}

// Every stream of the device, the legacy one included.
std::vector<CUstream_st*> streams_of(int dev) {
  Device& d = device(dev);
  std::lock_guard lock(d.mu);
  std::vector<CUstream_st*> all = d.streams;
  if (d.legacy != nullptr) all.push_back(d.legacy);
  return all;
}

cudaError_t check_device() {
  if (config().init_error != cudaSuccess) return record(config().init_error);
  if (config().devices == 0) return record(cudaErrorNoDevice);
  return record(sticky_error(t_device));
}

// The allocation that holds [p, p + bytes), or null; the caller holds state().mu.
const Allocation* find(const void* p, size_t bytes, uintptr_t* base = nullptr) {
  auto& all = state().allocations;
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = all.upper_bound(at);
  if (it == all.begin()) return nullptr;
  --it;
  if (at + bytes > it->first + it->second.bytes || at < it->first) return nullptr;
  if (base != nullptr) *base = it->first;
  return &it->second;
}

enum class Space { kPageable, kPinned, kDevice, kBad };

// Where [p, p + bytes) lives: device memory, pinned host memory, pageable host memory,
// or straddling an allocation's end (kBad).
Space space_of(const void* p, size_t bytes) {
  std::lock_guard lock(state().mu);
  const Allocation* a = find(p, 1);
  if (a == nullptr) return Space::kPageable;
  if (find(p, bytes) == nullptr) return Space::kBad;
  switch (a->kind) {
    case Kind::kPinned:
    case Kind::kRegistered: return Space::kPinned;
    default: return Space::kDevice;
  }
}

cudaError_t allocate_device(void** ptr, size_t bytes, int dev) {
  if (ptr == nullptr) return cudaErrorInvalidValue;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (!charge(dev, bytes)) return cudaErrorMemoryAllocation;
  Allocation a;
  a.bytes = bytes;
  a.device = dev;
  void* p = nullptr;
  if (bytes < kHeapLimit) {
    if (posix_memalign(&p, kAlignment, bytes) != 0) {
      uncharge(dev, bytes);
      return cudaErrorMemoryAllocation;
    }
    a.kind = Kind::kHeap;
  } else {
    const size_t total = round_up(bytes, page_size());
    const std::string name = "hearth-emu-malloc:dev" + std::to_string(dev);
    const int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    void* map = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(total)) == 0) {
      map = mmap(nullptr, total + page_size(), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (map != MAP_FAILED &&
          mmap(map, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        munmap(map, total + page_size());
        map = MAP_FAILED;
      }
    }
    if (map == MAP_FAILED) {
      if (fd >= 0) close(fd);
      uncharge(dev, bytes);
      return cudaErrorMemoryAllocation;
    }
    // The data ends as near the guard page as the alignment allows.
    p = static_cast<char*>(map) + ((total - bytes) & ~(kAlignment - 1));
    a.kind = Kind::kMapped;
    a.fd = fd;
    a.map = map;
    a.map_bytes = total + page_size();
  }
  // What a new allocation holds on a GPU is undefined: 0xff bytes (NaN as floats) make a
  // read of memory never written show.
  std::memset(p, 0xff, bytes);
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

void release(void* p, const Allocation& a) {
  switch (a.kind) {
    case Kind::kHeap: std::free(p); break;
    case Kind::kMapped:
      munmap(a.map, a.map_bytes);
      close(a.fd);
      break;
    case Kind::kImported: munmap(a.map, a.map_bytes); break;
    case Kind::kPinned: std::free(p); break;
    case Kind::kRegistered:
    case Kind::kVmm: break;
  }
}

// Removes the allocation at `p` of one of `kinds` from the register; false when there is none.
bool take(void* p, std::initializer_list<Kind> kinds, Allocation* out) {
  std::lock_guard lock(state().mu);
  auto it = state().allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == state().allocations.end()) return false;
  bool ok = false;
  for (Kind k : kinds) ok = ok || it->second.kind == k;
  if (!ok) return false;
  *out = it->second;
  state().allocations.erase(it);
  return true;
}

const char* error_name(cudaError_t e) {
  switch (e) {
#define HEARTH_EMU_NAME(x) \
  case x: return #x;
    HEARTH_EMU_NAME(cudaSuccess)
    HEARTH_EMU_NAME(cudaErrorInvalidValue)
    HEARTH_EMU_NAME(cudaErrorMemoryAllocation)
    HEARTH_EMU_NAME(cudaErrorInitializationError)
    HEARTH_EMU_NAME(cudaErrorInvalidConfiguration)
    HEARTH_EMU_NAME(cudaErrorInvalidDevicePointer)
    HEARTH_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    HEARTH_EMU_NAME(cudaErrorInsufficientDriver)
    HEARTH_EMU_NAME(cudaErrorDevicesUnavailable)
    HEARTH_EMU_NAME(cudaErrorNoDevice)
    HEARTH_EMU_NAME(cudaErrorInvalidDevice)
    HEARTH_EMU_NAME(cudaErrorECCUncorrectable)
    HEARTH_EMU_NAME(cudaErrorInvalidResourceHandle)
    HEARTH_EMU_NAME(cudaErrorNotReady)
    HEARTH_EMU_NAME(cudaErrorIllegalAddress)
    HEARTH_EMU_NAME(cudaErrorLaunchOutOfResources)
    HEARTH_EMU_NAME(cudaErrorLaunchTimeout)
    HEARTH_EMU_NAME(cudaErrorContextIsDestroyed)
    HEARTH_EMU_NAME(cudaErrorAssert)
    HEARTH_EMU_NAME(cudaErrorHostMemoryAlreadyRegistered)
    HEARTH_EMU_NAME(cudaErrorHostMemoryNotRegistered)
    HEARTH_EMU_NAME(cudaErrorHardwareStackError)
    HEARTH_EMU_NAME(cudaErrorIllegalInstruction)
    HEARTH_EMU_NAME(cudaErrorMisalignedAddress)
    HEARTH_EMU_NAME(cudaErrorInvalidAddressSpace)
    HEARTH_EMU_NAME(cudaErrorInvalidPc)
    HEARTH_EMU_NAME(cudaErrorLaunchFailure)
    HEARTH_EMU_NAME(cudaErrorNotSupported)
    HEARTH_EMU_NAME(cudaErrorUnknown)
#undef HEARTH_EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorNotSupported: return "operation not supported";
    default: return error_name(e);
  }
}

}  // namespace

uint64_t seed() {
  static const uint64_t s = [] {
    if (const char* e = std::getenv("HEARTH_EMU_SEED"); e != nullptr && *e != '\0') {
      return static_cast<uint64_t>(std::strtoull(e, nullptr, 10));
    }
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  return s;
}

int current_device() { return t_device; }
int device_count() { return config().init_error == cudaSuccess ? config().devices : 0; }

cudaError_t record(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

cudaError_t sticky_error(int dev) {
  if (dev < 0 || dev >= 16) return cudaSuccess;
  return static_cast<cudaError_t>(device(dev).sticky.load(std::memory_order_acquire));
}

void fault(int dev, cudaError_t error, const std::string& message) {
  std::fprintf(stderr, "hearth-emu: device %d: %s (HEARTH_EMU_SEED=%llu reproduces the thread order)\n", dev,
               message.c_str(), static_cast<unsigned long long>(seed()));
  int expected = cudaSuccess;
  device(dev).sticky.compare_exchange_strong(expected, error);
}

int stream_device(cudaStream_t stream) { return stream != nullptr ? stream->device : t_device; }

cudaError_t enqueue(cudaStream_t stream, std::function<void()> op) {
  CUstream_st* s = stream != nullptr ? stream : legacy_stream(t_device);
  if (const cudaError_t e = sticky_error(s->device); e != cudaSuccess) return record(e);
  // The legacy default stream and the blocking streams wait for one another.
  if (s->legacy) {
    for (CUstream_st* other : streams_of(s->device)) {
      if (other != s && other->blocking) wait_idle(other);
    }
  } else if (s->blocking) {
    CUstream_st* legacy = nullptr;
    {
      Device& d = device(s->device);
      std::lock_guard lock(d.mu);
      legacy = d.legacy;
    }
    if (legacy != nullptr) wait_idle(legacy);
  }
  {
    std::lock_guard lock(s->mu);
    s->queue.push_back(std::move(op));
    ++s->submitted;
  }
  s->work.notify_one();
  return cudaSuccess;
}

cudaError_t drain(cudaStream_t stream) {
  CUstream_st* s = stream != nullptr ? stream : legacy_stream(t_device);
  wait_idle(s);
  return record(sticky_error(s->device));
}

void drain_device(int dev) {
  for (CUstream_st* s : streams_of(dev)) wait_idle(s);
}

uint64_t next_launch_index(cudaStream_t stream) {
  CUstream_st* s = stream != nullptr ? stream : legacy_stream(t_device);
  return s->launches.fetch_add(1);
}

bool charge(int dev, size_t bytes) {
  Device& d = device(dev);
  std::lock_guard lock(d.mu);
  if (bytes > config().memory - d.used) return false;
  d.used += bytes;
  return true;
}

void uncharge(int dev, size_t bytes) {
  Device& d = device(dev);
  std::lock_guard lock(d.mu);
  d.used -= std::min(bytes, d.used);
}

void register_device_range(void* p, size_t bytes, int dev) {
  Allocation a;
  a.bytes = bytes;
  a.device = dev;
  a.kind = Kind::kVmm;
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<uintptr_t>(p)] = a;
}

void unregister_device_range(void* p) {
  std::lock_guard lock(state().mu);
  state().allocations.erase(reinterpret_cast<uintptr_t>(p));
}

}  // namespace hearth::emu

using namespace hearth::emu;  // NOLINT: the runtime's C-style entry points below

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record(cudaErrorInvalidValue);
  *count = device_count();
  if (config().init_error != cudaSuccess) return record(config().init_error);
  return *count == 0 ? record(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int dev) {
  if (prop == nullptr) return record(cudaErrorInvalidValue);
  if (dev < 0 || dev >= device_count()) return record(cudaErrorInvalidDevice);
  *prop = {};
  std::snprintf(prop->name, sizeof prop->name, "hearth emulated device %d (sm_90 on the CPU)", dev);
  // "GPU-68656172-7468-2d65-6d75-0000000000NN": "hearth-emu" and the index.
  const char uuid[16] = {'h', 'e', 'a', 'r', 't', 'h', '-', 'e', 'm', 'u', 0, 0, 0, 0, 0, static_cast<char>(dev)};
  std::memcpy(prop->uuid.bytes, uuid, sizeof uuid);
  prop->totalGlobalMem = config().memory;
  prop->sharedMemPerBlock = 48u << 10;
  prop->sharedMemPerBlockOptin = 227u << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int dev) {
  if (config().init_error != cudaSuccess) return record(config().init_error);
  if (device_count() == 0) return record(cudaErrorNoDevice);
  if (dev < 0 || dev >= device_count()) return record(cudaErrorInvalidDevice);
  t_device = dev;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* dev) {
  if (dev == nullptr) return record(cudaErrorInvalidValue);
  *dev = t_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  drain_device(t_device);
  return record(sticky_error(t_device));
}

cudaError_t cudaGetLastError() {
  if (const cudaError_t e = sticky_error(t_device); e != cudaSuccess) return e;
  return std::exchange(t_last, cudaSuccess);
}

cudaError_t cudaPeekAtLastError() {
  if (const cudaError_t e = sticky_error(t_device); e != cudaSuccess) return e;
  return t_last;
}

const char* cudaGetErrorString(cudaError_t e) { return error_string(e); }
const char* cudaGetErrorName(cudaError_t e) { return error_name(e); }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  return record(allocate_device(ptr, bytes, t_device));
}

cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  // As on a GPU, freeing waits for the work of the allocation's device, which may still
  // use the memory.
  int owner = -1;
  {
    std::lock_guard lock(state().mu);
    auto it = state().allocations.find(reinterpret_cast<uintptr_t>(ptr));
    if (it != state().allocations.end()) owner = it->second.device;
  }
  if (owner >= 0) drain_device(owner);
  Allocation a;
  if (!take(ptr, {Kind::kHeap, Kind::kMapped}, &a)) return record(cudaErrorInvalidDevicePointer);
  release(ptr, a);
  uncharge(a.device, a.bytes);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (posix_memalign(ptr, kAlignment, std::max<size_t>(bytes, 1)) != 0) return record(cudaErrorMemoryAllocation);
  Allocation a;
  a.bytes = std::max<size_t>(bytes, 1);
  a.kind = Kind::kPinned;
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<uintptr_t>(*ptr)] = a;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  for (int d = 0; d < device_count(); ++d) drain_device(d);
  Allocation a;
  if (!take(ptr, {Kind::kPinned}, &a)) return record(cudaErrorInvalidValue);
  release(ptr, a);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned int) {
  if (ptr == nullptr || bytes == 0) return record(cudaErrorInvalidValue);
  std::lock_guard lock(state().mu);
  if (find(ptr, 1) != nullptr) return record(cudaErrorHostMemoryAlreadyRegistered);
  Allocation a;
  a.bytes = bytes;
  a.kind = Kind::kRegistered;
  state().allocations[reinterpret_cast<uintptr_t>(ptr)] = a;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  Allocation a;
  if (!take(ptr, {Kind::kRegistered}, &a)) return record(cudaErrorHostMemoryNotRegistered);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  Device& d = device(t_device);
  std::lock_guard lock(d.mu);
  if (free_bytes != nullptr) *free_bytes = config().memory - d.used;
  if (total_bytes != nullptr) *total_bytes = config().memory;
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return record(cudaErrorInvalidValue);
  const Space d = space_of(dst, bytes), s = space_of(src, bytes);
  if (d == Space::kBad || s == Space::kBad) return record(cudaErrorInvalidValue);
  const bool d_dev = d == Space::kDevice, s_dev = s == Space::kDevice;
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!d_dev || s_dev) return record(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToHost:
      if (d_dev || !s_dev) return record(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDeviceToDevice:
      if (!d_dev || !s_dev) return record(cudaErrorInvalidValue);
      break;
    case cudaMemcpyHostToHost:
      if (d_dev || s_dev) return record(cudaErrorInvalidValue);
      break;
    case cudaMemcpyDefault: break;
    default: return record(cudaErrorInvalidMemcpyDirection);
  }
  if (s == Space::kPageable && d_dev) {
    // From pageable memory the copy is staged before the call returns: the caller may
    // reuse its buffer at once.
    auto staged = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                           static_cast<const std::byte*>(src) + bytes);
    return enqueue(stream, [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
  }
  if (const cudaError_t e = enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); }); e != cudaSuccess) {
    return e;
  }
  // Into pageable memory the copy has completed when the call returns.
  if (d == Space::kPageable && s_dev) return drain(stream);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); e != cudaSuccess) return e;
  return drain(nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  if (ptr == nullptr || space_of(ptr, bytes) != Space::kDevice) return record(cudaErrorInvalidValue);
  return enqueue(stream, [ptr, value, bytes] { std::memset(ptr, value, bytes); });
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr); e != cudaSuccess) return e;
  return drain(nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  if (stream == nullptr) return record(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  CUstream_st* s = new_stream(t_device, (flags & cudaStreamNonBlocking) == 0, false);
  Device& d = device(t_device);
  std::lock_guard lock(d.mu);
  d.streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream->legacy) return record(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard lock(stream->mu);
    stream->stop = true;  // the worker runs what is queued, then ends
  }
  stream->work.notify_one();
  stream->worker.join();
  {
    Device& d = device(stream->device);
    std::lock_guard lock(d.mu);
    std::erase(d.streams, stream);
  }
  std::lock_guard lock(state().mu);
  state().retired.push_back(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return drain(stream); }

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  CUstream_st* s = stream != nullptr ? stream : legacy_stream(t_device);
  if (const cudaError_t e = sticky_error(s->device); e != cudaSuccess) return record(e);
  std::lock_guard lock(s->mu);
  return s->completed == s->submitted ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  if (event == nullptr) return record(cudaErrorInvalidValue);
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  CUstream_st* s = stream != nullptr ? stream : legacy_stream(t_device);
  if (const cudaError_t e = sticky_error(s->device); e != cudaSuccess) return record(e);
  uint64_t seq = 0;
  {
    std::lock_guard lock(s->mu);
    seq = s->submitted;
  }
  std::lock_guard lock(event->mu);
  event->stream = s;
  event->seq = seq;
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  std::lock_guard lock(event->mu);
  if (event->stream == nullptr) return cudaSuccess;
  if (const cudaError_t e = sticky_error(event->stream->device); e != cudaSuccess) return record(e);
  std::lock_guard slock(event->stream->mu);
  return event->stream->completed >= event->seq ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return record(cudaErrorInvalidResourceHandle);
  CUstream_st* s = nullptr;
  uint64_t seq = 0;
  {
    std::lock_guard lock(event->mu);
    s = event->stream;
    seq = event->seq;
  }
  if (s == nullptr) return cudaSuccess;
  std::unique_lock lock(s->mu);
  s->idle.wait(lock, [s, seq] { return s->completed >= seq; });
  return record(sticky_error(s->device));
}

namespace {

// A legacy IPC handle: the exporter's pid and the fd of the allocation's memfd, which the
// importer opens through /proc (so it dies with its exporter, as a legacy handle does).
struct IpcHandle {
  char magic[8];
  int32_t pid;
  int32_t fd;
  int32_t device;
  int32_t pad;
  uint64_t offset;
  uint64_t bytes;
  uint64_t map_bytes;
};
static_assert(sizeof(IpcHandle) <= sizeof(cudaIpcMemHandle_t::reserved));
constexpr char kIpcMagic[8] = {'h', 'e', 'm', 'u', 'i', 'p', 'c', '1'};

}  // namespace

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr) {
  if (handle == nullptr) return record(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  std::lock_guard lock(state().mu);
  auto it = state().allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == state().allocations.end() || (it->second.kind != Kind::kMapped && it->second.kind != Kind::kHeap)) {
    return record(cudaErrorInvalidValue);
  }
  const Allocation& a = it->second;
  if (a.kind == Kind::kHeap) {
    std::fprintf(stderr, "hearth-emu: an IPC handle names an allocation of %zu KiB or more (this one is %zu bytes)\n",
                 kHeapLimit >> 10, a.bytes);
    return record(cudaErrorNotSupported);
  }
  IpcHandle h{};
  std::memcpy(h.magic, kIpcMagic, sizeof kIpcMagic);
  h.pid = static_cast<int32_t>(getpid());
  h.fd = a.fd;
  h.device = a.device;
  h.offset = static_cast<uint64_t>(static_cast<char*>(ptr) - static_cast<char*>(a.map));
  h.bytes = a.bytes;
  h.map_bytes = a.map_bytes;
  *handle = {};
  std::memcpy(handle->reserved, &h, sizeof h);
  return cudaSuccess;
}

cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int) {
  if (ptr == nullptr) return record(cudaErrorInvalidValue);
  if (const cudaError_t e = check_device(); e != cudaSuccess) return e;
  IpcHandle h;
  std::memcpy(&h, handle.reserved, sizeof h);
  if (std::memcmp(h.magic, kIpcMagic, sizeof kIpcMagic) != 0 || h.map_bytes <= page_size()) {
    return record(cudaErrorInvalidValue);
  }
  if (h.pid == getpid()) return record(cudaErrorInvalidValue);  // CUDA refuses a process its own handle
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return record(cudaErrorInvalidValue);  // the exporter has exited
  const size_t data_bytes = h.map_bytes - page_size();
  void* map = mmap(nullptr, h.map_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (map != MAP_FAILED && mmap(map, data_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
    munmap(map, h.map_bytes);
    map = MAP_FAILED;
  }
  close(fd);
  if (map == MAP_FAILED) return record(cudaErrorMemoryAllocation);
  Allocation a;
  a.bytes = h.bytes;
  a.device = t_device;
  a.kind = Kind::kImported;
  a.map = map;
  a.map_bytes = h.map_bytes;
  void* p = static_cast<char*>(map) + h.offset;
  std::lock_guard lock(state().mu);
  state().allocations[reinterpret_cast<uintptr_t>(p)] = a;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaIpcCloseMemHandle(void* ptr) {
  Allocation a;
  if (!take(ptr, {Kind::kImported}, &a)) return record(cudaErrorInvalidValue);
  drain_device(a.device);
  release(ptr, a);
  return cudaSuccess;
}

cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || fn == nullptr) return record(cudaErrorInvalidValue);
  *fn = driver_entry_point(symbol);
  if (status != nullptr) *status = *fn != nullptr ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
  return cudaSuccess;
}
