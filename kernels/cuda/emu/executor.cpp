// The execution model: a grid runs one block at a time on its stream's host thread; a
// block's threads are fibers (Boost.Context's fcontext) on stacks of their own, each
// resumed until it reaches __syncthreads, a warp collective or its end. Which ready fiber
// runs next is drawn from the seed, under one of two policies drawn per block: any ready
// thread, or the threads of one warp for as long as it has any (so one warp can run far
// ahead of the others, as a GPU may let it). A barrier releases its block when every
// thread has arrived; a collective releases the lanes of its mask when every lane of it
// that has not exited has (CUDA's rule). When nothing can run and some thread has not
// finished, the block would hang on a GPU: the launch fails with a report of who waits
// where.
#include <sys/mman.h>
#include <unistd.h>

#include <boost/context/detail/fcontext.hpp>

#include <atomic>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/half.h"
#include "kernels/cuda/emu/device.h"
#include "kernels/cuda/emu/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define HEARTH_EMU_ASAN 1
#else
#define HEARTH_EMU_ASAN 0
#endif

namespace ctx = boost::context::detail;

namespace hearth::emu {

namespace detail {
thread_local const uint3* t_thread_idx = nullptr;
thread_local uint3 t_block_idx{0, 0, 0};
thread_local dim3 t_block_dim;
thread_local dim3 t_grid_dim;
thread_local void* t_dynamic_shared = nullptr;
}  // namespace detail

namespace {

// A fiber's stack: ASan's frames are several times larger than plain ones.
constexpr size_t kStackBytes = HEARTH_EMU_ASAN ? (256u << 10) : (64u << 10);
constexpr int kWarpSize = 32;
constexpr size_t kSharedTail = 64;  // bytes checked after a block's dynamic shared memory

// What the sm_90 part the emulator stands for allows a launch.
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlock[3] = {1024, 1024, 64};
constexpr unsigned kMaxGrid[3] = {0x7fffffffu, 65535, 65535};
constexpr size_t kSharedPerBlock = 48u << 10;

// Stacks for a host thread's fibers, kept for its later blocks; each has a guard page
// below it, so an overflow faults instead of writing into its neighbour.
class StackPool {
 public:
  ~StackPool() {
    for (void* m : maps_) {
#if HEARTH_EMU_ASAN
      // Fibers that ended by switching away left their frames' redzones poisoned; the
      // shadow outlives the mapping, and a later mapping at the same address (device
      // memory) would read as a stack buffer.
      ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(m) + page(), kStackBytes);
#endif
      munmap(m, kStackBytes + page());
    }
  }
  // The top of stack i.
  void* top(size_t i) {
    while (maps_.size() <= i) {
      void* m = mmap(nullptr, kStackBytes + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                     -1, 0);
      if (m == MAP_FAILED) throw std::bad_alloc();
      mprotect(m, page(), PROT_NONE);
      maps_.push_back(m);
    }
    return static_cast<char*>(maps_[i]) + page() + kStackBytes;
  }
  void* bottom(size_t i) { return static_cast<char*>(maps_[i]) + page(); }

 private:
  static size_t page() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
  std::vector<void*> maps_;
};

enum class State : uint8_t { kRunnable, kBarrier, kWarp, kDone };

struct Thread {
  ctx::fcontext_t fiber = nullptr;
  uint3 idx{0, 0, 0};
  int warp = 0, lane = 0;
  State state = State::kRunnable;
  uint64_t shuffled = 0;  // what its last warp collective gave it
  uint32_t mma_d[4] = {};  // what its last mma.sync gave it (s32 or f32 bits)
  void* fake_stack = nullptr;
};

// A warp collective being gathered: the first lane to arrive sets what it is; each lane
// brings its own value, source operand and width.
struct Warp {
  unsigned lanes = 0;    // the lanes this warp has
  unsigned exited = 0;   // lanes that have finished the kernel
  unsigned arrived = 0;  // lanes that have reached the collective
  unsigned mask = 0;
  int kind = 0;  // a Shuffle, or -1 for __syncwarp
  int first_lane = 0;
  uint64_t values[kWarpSize] = {};
  int params[kWarpSize] = {};
  int widths[kWarpSize] = {};
  // The operands each lane brings to an mma.sync.
  uint32_t mma_a[kWarpSize][4] = {};
  uint32_t mma_b[kWarpSize][2] = {};
  uint32_t mma_c[kWarpSize][4] = {};  // s32 or f32 bits
  std::vector<int> ready;  // its threads that can run
};

// The collective kinds of the mma.sync shapes (the Shuffle kinds are 0 and up,
// __syncwarp -1).
constexpr int kMmaS8Kind = -2;   // m16n8k32, s8 inputs, s32 accumulators
constexpr int kMmaF16Kind = -3;  // m16n8k16, f16 inputs, f32 accumulators

// mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 over a whole warp's operands, as the
// PTX ISA's "Matrix Fragments for mma.m16n8k32" lays them out across the lanes (groupID =
// lane / 4, threadID_in_group = lane % 4; element i of a register is its byte i, lowest
// first): A (16 x 32, row-major) in four registers a lane, rows groupID and groupID + 8,
// columns 4 * threadID_in_group + byte and 16 more; B (32 x 8, column-major) in two,
// column groupID, rows 4 * threadID_in_group + byte and 16 more; C and D (16 x 8, s32) in
// four, rows groupID and groupID + 8, columns 2 * threadID_in_group and the next. Each
// lane's part of D into d[lane].
void mma_m16n8k32_s8(const Warp& w, uint32_t d[kWarpSize][4]) {
  int8_t a[16][32], b[32][8];
  for (int l = 0; l < kWarpSize; ++l) {
    const int group = l / 4, in_group = l % 4;
    for (int r = 0; r < 4; ++r) {
      for (int byte = 0; byte < 4; ++byte) {
        const int row = group + ((r & 1) != 0 ? 8 : 0), col = 4 * in_group + byte + ((r & 2) != 0 ? 16 : 0);
        a[row][col] = static_cast<int8_t>(w.mma_a[l][r] >> (8 * byte));
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int byte = 0; byte < 4; ++byte) {
        b[4 * in_group + byte + 16 * r][group] = static_cast<int8_t>(w.mma_b[l][r] >> (8 * byte));
      }
    }
  }
  for (int l = 0; l < kWarpSize; ++l) {
    const int group = l / 4, in_group = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = group + (i >= 2 ? 8 : 0), col = 2 * in_group + (i & 1);
      uint32_t sum = w.mma_c[l][i];  // s32 wraps
      for (int k = 0; k < 32; ++k) sum += static_cast<uint32_t>(static_cast<int32_t>(a[row][k]) * b[k][col]);
      d[l][i] = sum;
    }
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 over a whole warp's operands, from
// the PTX ISA's "Matrix Fragments for mma.m16n8k16 with floating point type" (element i of
// a register is its half i, lowest first): A (16 x 16, row-major) in four registers a
// lane, rows groupID (registers 0 and 2) and groupID + 8 (1 and 3), columns
// 2 * threadID_in_group + half (registers 0 and 1) and 8 more (2 and 3); B (16 x 8,
// column-major) in two, column groupID, rows 2 * threadID_in_group + half and 8 more; C
// and D as for m16n8k32, in f32. The products of f16 values are exact in f32; they are
// added in column order onto C (a GPU's order within the instruction is its own).
void mma_m16n8k16_f16(const Warp& w, uint32_t d[kWarpSize][4]) {
  float a[16][16], b[16][8];
  for (int l = 0; l < kWarpSize; ++l) {
    const int group = l / 4, in_group = l % 4;
    for (int r = 0; r < 4; ++r) {
      for (int half = 0; half < 2; ++half) {
        const int row = group + ((r & 1) != 0 ? 8 : 0), col = 2 * in_group + half + ((r & 2) != 0 ? 8 : 0);
        a[row][col] = fp16_to_f32(static_cast<uint16_t>(w.mma_a[l][r] >> (16 * half)));
      }
    }
    for (int r = 0; r < 2; ++r) {
      for (int half = 0; half < 2; ++half) {
        b[2 * in_group + half + 8 * r][group] = fp16_to_f32(static_cast<uint16_t>(w.mma_b[l][r] >> (16 * half)));
      }
    }
  }
  for (int l = 0; l < kWarpSize; ++l) {
    const int group = l / 4, in_group = l % 4;
    for (int i = 0; i < 4; ++i) {
      const int row = group + (i >= 2 ? 8 : 0), col = 2 * in_group + (i & 1);
      float sum;
      std::memcpy(&sum, &w.mma_c[l][i], 4);
      for (int k = 0; k < 16; ++k) sum += a[row][k] * b[k][col];
      std::memcpy(&d[l][i], &sum, 4);
    }
  }
}

// Thrown in a fiber at a fault; its entry catches it, so no exception crosses a switch.
struct Fault {};

const char* collective_name(int kind) {
  switch (kind) {
    case static_cast<int>(Shuffle::kIndex): return "__shfl_sync";
    case static_cast<int>(Shuffle::kUp): return "__shfl_up_sync";
    case static_cast<int>(Shuffle::kDown): return "__shfl_down_sync";
    case static_cast<int>(Shuffle::kXor): return "__shfl_xor_sync";
    case kMmaS8Kind: return "mma.sync.m16n8k32.s8";
    case kMmaF16Kind: return "mma.sync.m16n8k16.f16";
    default: return "__syncwarp";
  }
}

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

class Block {
 public:
  Block(const Grid& g, StackPool& stacks) : g_(g), stacks_(stacks) {
    n_ = g.block.x * g.block.y * g.block.z;
    threads_.resize(n_);
    warps_.resize((n_ + kWarpSize - 1) / kWarpSize);
    for (unsigned i = 0; i < n_; ++i) {
      Thread& t = threads_[i];
      t.idx = {i % g.block.x, (i / g.block.x) % g.block.y, i / (g.block.x * g.block.y)};
      t.warp = static_cast<int>(i / kWarpSize);
      t.lane = static_cast<int>(i % kWarpSize);
      warps_[static_cast<size_t>(t.warp)].lanes |= 1u << t.lane;
    }
  }

  // Runs block `b` of the grid; false after a fault (reported in what()).
  bool run(uint3 b, uint64_t order_seed) {
    detail::t_block_idx = b;
    rng_ = order_seed;
    done_ = 0;
    at_barrier_ = 0;
    n_ready_ = 0;
    for (Warp& w : warps_) {
      w.arrived = 0;
      w.exited = 0;
      w.ready.clear();
    }
    for (unsigned i = 0; i < n_; ++i) {
      Thread& t = threads_[i];
      t.fiber = ctx::make_fcontext(stacks_.top(i), kStackBytes, &Block::entry);
      release(t);
    }
    const bool warp_at_a_time = next_random() % 2 == 0;
    size_t warp = 0;
    Block* outer = current_block;
    current_block = this;
    while (n_ready_ > 0 && fault_.empty()) {
      // The next warp: the same one while it has ready threads under the warp policy,
      // else one with ready threads, drawn.
      if (!warp_at_a_time || warps_[warp].ready.empty()) {
        size_t pick = next_random() % warps_.size();
        while (warps_[pick].ready.empty()) pick = (pick + 1) % warps_.size();
        warp = pick;
      }
      std::vector<int>& ready = warps_[warp].ready;
      const size_t k = next_random() % ready.size();
      const int i = ready[k];
      ready[k] = ready.back();
      ready.pop_back();
      --n_ready_;
      resume(threads_[static_cast<size_t>(i)]);
    }
    current_block = outer;
    if (fault_.empty() && done_ < n_) fault_ = hang_report();
    if (!fault_.empty()) {
#if HEARTH_EMU_ASAN
      // The abandoned fibers' frames leave their stacks poisoned.
      for (unsigned i = 0; i < n_; ++i) ASAN_UNPOISON_MEMORY_REGION(stacks_.bottom(i), kStackBytes);
#endif
      return false;
    }
    return true;
  }

  const std::string& what() const { return fault_; }

  // The calls kernels make, through the thread-local current block.
  static Block& current(const char* call) {
    if (current_block == nullptr) {
      std::fprintf(stderr, "hearth-emu: %s called outside a kernel\n", call);
      std::abort();
    }
    return *current_block;
  }

  void sync_threads() {
    Thread& t = *running_;
    t.state = State::kBarrier;
    if (++at_barrier_ == n_) {
      at_barrier_ = 0;
      for (unsigned i = 0; i < n_; ++i) release(threads_[i]);
    }
    yield(t);
  }

  uint64_t collective(unsigned mask, uint64_t bits, int kind, int param, int width) {
    Thread& t = *running_;
    Warp& w = warps_[static_cast<size_t>(t.warp)];
    const unsigned me = 1u << t.lane;
    if ((mask & me) == 0) {
      fail(t, fmt("%s with mask 0x%08x, which leaves out the calling lane %d", collective_name(kind), mask, t.lane));
    }
    if ((mask & ~w.lanes) != 0) {
      fail(t, fmt("%s with mask 0x%08x, which names lanes 0x%08x that warp %d does not have (%u threads per block)",
                  collective_name(kind), mask, mask & ~w.lanes, t.warp, n_));
    }
    if (kind >= 0 && (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0)) {
      fail(t, fmt("%s with width %d, which is not a power of two up to 32", collective_name(kind), width));
    }
    if (w.arrived == 0) {
      w.mask = mask;
      w.kind = kind;
      w.first_lane = t.lane;
    } else if (w.mask != mask || w.kind != kind) {
      fail(t, fmt("lanes of warp %d disagree: lane %d is in %s with mask 0x%08x, lane %d in %s with mask 0x%08x",
                  t.warp, w.first_lane, collective_name(w.kind), w.mask, t.lane, collective_name(kind), mask));
    }
    w.values[t.lane] = bits;
    w.params[t.lane] = param;
    w.widths[t.lane] = width;
    w.arrived |= me;
    t.state = State::kWarp;
    if (w.arrived == (mask & ~w.exited)) complete(w, t.warp);
    yield(t);
    return t.shuffled;
  }

  // An mma.sync: every lane of the warp brings its fragments, and each gets its part of D
  // when the last arrives (a warp of fewer than 32 threads, or one with a lane that has
  // exited, is a fault: the instruction is .aligned, for all 32 lanes).
  void mma(int kind, uint32_t d[4], const uint32_t a[4], const uint32_t b[2], const uint32_t c[4]) {
    Thread& t = *running_;
    Warp& w = warps_[static_cast<size_t>(t.warp)];
    if (w.lanes != 0xffffffffu) {
      fail(t, fmt("mma.sync in warp %d, which has lanes 0x%08x, not all 32 (%u threads per block)", t.warp, w.lanes,
                  n_));
    }
    std::memcpy(w.mma_a[t.lane], a, sizeof w.mma_a[0]);
    std::memcpy(w.mma_b[t.lane], b, sizeof w.mma_b[0]);
    std::memcpy(w.mma_c[t.lane], c, sizeof w.mma_c[0]);
    collective(0xffffffffu, 0, kind, 0, kWarpSize);
    std::memcpy(d, t.mma_d, sizeof t.mma_d);
  }

 private:
  static void entry(ctx::transfer_t from) {
    Block& b = *current_block;
    Thread& t = *static_cast<Thread*>(from.data);
    b.scheduler_ = from.fctx;
#if HEARTH_EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_, &b.scheduler_stack_size_);
#endif
    try {
      g_body(b);
    } catch (const Fault&) {
    }
    t.state = State::kDone;
    ++b.done_;
    // A lane that exits no longer holds up its warp's collective.
    Warp& w = b.warps_[static_cast<size_t>(t.warp)];
    w.exited |= 1u << t.lane;
    if (w.arrived != 0 && w.arrived == (w.mask & ~w.exited)) b.complete(w, t.warp);
#if HEARTH_EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, b.scheduler_stack_, b.scheduler_stack_size_);
#endif
    ctx::jump_fcontext(b.scheduler_, nullptr);
  }

  static void g_body(Block& b) { b.g_.body(); }

  void resume(Thread& t) {
    running_ = &t;
    detail::t_thread_idx = &t.idx;
#if HEARTH_EMU_ASAN
    void* fake = nullptr;
    const size_t i = static_cast<size_t>(&t - threads_.data());
    __sanitizer_start_switch_fiber(&fake, stacks_.bottom(i), kStackBytes);
#endif
    ctx::transfer_t back = ctx::jump_fcontext(t.fiber, &t);
#if HEARTH_EMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    t.fiber = back.fctx;
    running_ = nullptr;
  }

  void yield([[maybe_unused]] Thread& t) {
#if HEARTH_EMU_ASAN
    __sanitizer_start_switch_fiber(&t.fake_stack, scheduler_stack_, scheduler_stack_size_);
#endif
    ctx::transfer_t back = ctx::jump_fcontext(scheduler_, nullptr);
    scheduler_ = back.fctx;
#if HEARTH_EMU_ASAN
    __sanitizer_finish_switch_fiber(t.fake_stack, &scheduler_stack_, &scheduler_stack_size_);
#endif
  }

  void release(Thread& t) {
    t.state = State::kRunnable;
    warps_[static_cast<size_t>(t.warp)].ready.push_back(static_cast<int>(&t - threads_.data()));
    ++n_ready_;
  }

  uint64_t next_random() {
    rng_ = mix(rng_);
    return rng_;
  }

  // Every lane of the collective that has not exited has arrived: each gets the value of
  // the source lane its own operand and width name.
  void complete(Warp& w, int warp) {
    const unsigned present = w.mask & ~w.exited;
    const bool mma = w.kind == kMmaS8Kind || w.kind == kMmaF16Kind;
    if (mma && w.exited != 0) {
      fault_ = fmt("kernel %s: lanes 0x%08x of warp %d reach an mma.sync that lanes 0x%08x have exited before "
                   "(undefined on a GPU: the instruction is for the whole warp)",
                   g_.name, w.arrived, warp, w.exited);
      return;
    }
    uint32_t mma_d[kWarpSize][4];
    if (w.kind == kMmaS8Kind) mma_m16n8k32_s8(w, mma_d);
    if (w.kind == kMmaF16Kind) mma_m16n8k16_f16(w, mma_d);
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if ((present & (1u << lane)) == 0) continue;
      Thread& t = threads_[static_cast<size_t>(warp * kWarpSize + lane)];
      if (w.kind >= 0) {
        const int width = w.widths[lane], param = w.params[lane];
        const int base = lane & ~(width - 1);
        int src = lane;
        switch (static_cast<Shuffle>(w.kind)) {
          case Shuffle::kIndex: src = base + (param & (width - 1)); break;
          case Shuffle::kUp: src = lane - param >= base ? lane - param : lane; break;
          case Shuffle::kDown: src = lane + param < base + width ? lane + param : lane; break;
          case Shuffle::kXor: src = (lane ^ param) < base + width ? lane ^ param : lane; break;
        }
        if (src < 0 || src >= kWarpSize || (present & (1u << src)) == 0) {
          fault_ = fmt("kernel %s: lane %d of warp %d reads lane %d in %s, which is not in its mask 0x%08x or has "
                       "exited (undefined on a GPU)",
                       g_.name, lane, warp, src, collective_name(w.kind), w.mask);
          return;
        }
        t.shuffled = w.values[src];
      } else if (mma) {
        std::memcpy(t.mma_d, mma_d[lane], sizeof t.mma_d);
      }
      release(t);
    }
    w.arrived = 0;
  }

  [[noreturn]] void fail(const Thread& t, const std::string& what) {
    const uint3 b = detail::t_block_idx;
    fault_ = fmt("kernel %s, block (%u,%u,%u), thread (%u,%u,%u): ", g_.name, b.x, b.y, b.z, t.idx.x, t.idx.y,
                 t.idx.z) +
             what;
    throw Fault{};
  }

  std::string hang_report() const {
    const uint3 b = detail::t_block_idx;
    unsigned exited = 0, in_warp = 0;
    for (const Thread& t : threads_) {
      exited += t.state == State::kDone ? 1 : 0;
      in_warp += t.state == State::kWarp ? 1 : 0;
    }
    std::string r = fmt("kernel %s, block (%u,%u,%u) would hang on a GPU:", g_.name, b.x, b.y, b.z);
    if (at_barrier_ > 0) {
      r += fmt(" __syncthreads reached by %u of %u threads (%u have exited, %u wait in warp collectives): a "
               "divergent barrier;",
               at_barrier_, n_, exited, in_warp);
    }
    for (size_t i = 0; i < warps_.size(); ++i) {
      const Warp& w = warps_[i];
      if (w.arrived == 0) continue;
      unsigned gone = 0, at_sync = 0;
      for (int lane = 0; lane < kWarpSize; ++lane) {
        if ((w.mask & ~w.arrived & (1u << lane)) == 0) continue;
        const State s = threads_[i * kWarpSize + static_cast<size_t>(lane)].state;
        if (s == State::kDone) gone |= 1u << lane;
        if (s == State::kBarrier) at_sync |= 1u << lane;
      }
      r += fmt(" warp %zu: lanes 0x%08x wait in %s over mask 0x%08x for lanes 0x%08x (0x%08x have exited, 0x%08x wait "
               "at __syncthreads);",
               i, w.arrived, collective_name(w.kind), w.mask, w.mask & ~w.arrived, gone, at_sync);
    }
    return r;
  }

  template <typename... A>
  static std::string fmt(const char* format, A... args) {
    char buf[1024];
    std::snprintf(buf, sizeof buf, format, args...);
    return buf;
  }

  static thread_local Block* current_block;

  const Grid& g_;
  StackPool& stacks_;
  unsigned n_ = 0;
  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  unsigned n_ready_ = 0;
  unsigned done_ = 0, at_barrier_ = 0;
  uint64_t rng_ = 0;
  Thread* running_ = nullptr;
  ctx::fcontext_t scheduler_ = nullptr;
  const void* scheduler_stack_ = nullptr;
  size_t scheduler_stack_size_ = 0;
  std::string fault_;
};

thread_local Block* Block::current_block = nullptr;

}  // namespace

void sync_threads() { Block::current("__syncthreads").sync_threads(); }

void sync_warp(unsigned mask) { Block::current("__syncwarp").collective(mask, 0, -1, 0, kWarpSize); }

void mma_m16n8k32_s8(int32_t d[4], const uint32_t a[4], const uint32_t b[2], const int32_t c[4]) {
  uint32_t cb[4], db[4];
  std::memcpy(cb, c, sizeof cb);
  Block::current("mma.sync").mma(kMmaS8Kind, db, a, b, cb);
  std::memcpy(d, db, sizeof db);
}

void mma_m16n8k16_f16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]) {
  uint32_t cb[4], db[4];
  std::memcpy(cb, c, sizeof cb);
  Block::current("mma.sync").mma(kMmaF16Kind, db, a, b, cb);
  std::memcpy(d, db, sizeof db);
}

uint64_t warp_shuffle(unsigned mask, uint64_t bits, Shuffle kind, int param, int width) {
  return Block::current("a warp shuffle").collective(mask, bits, static_cast<int>(kind), param, width);
}

cudaError_t launch(const char* name, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   KernelBody body) {
  if (const cudaError_t e = sticky_error(stream_device(stream)); e != cudaSuccess) return record(e);
  const unsigned g[3] = {grid.x, grid.y, grid.z}, b[3] = {block.x, block.y, block.z};
  for (int i = 0; i < 3; ++i) {
    if (g[i] == 0 || b[i] == 0 || g[i] > kMaxGrid[i] || b[i] > kMaxBlock[i]) {
      return record(cudaErrorInvalidConfiguration);
    }
  }
  if (static_cast<uint64_t>(block.x) * block.y * block.z > kMaxThreadsPerBlock) {
    return record(cudaErrorInvalidConfiguration);
  }
  if (shared_bytes > kSharedPerBlock) return record(cudaErrorInvalidValue);
  Grid run{name, grid, block, shared_bytes, stream_device(stream), next_launch_index(stream), std::move(body)};
  return enqueue(stream, [run = std::move(run)] { run_grid(run); });
}

void run_grid(const Grid& g) {
  thread_local StackPool stacks;
  // Dynamic shared memory: the launch's bytes in an allocation of their own, filled with
  // 0xff (NaN as floats) before each block, as a GPU's shared memory holds whatever was
  // there. Under AddressSanitizer the allocation is exactly shared_bytes, so an access
  // past them is reported; elsewhere kSharedTail more bytes of 0xff follow, and a block
  // that changed them has written past its shared memory.
  const size_t tail = HEARTH_EMU_ASAN ? 0 : kSharedTail;
  std::unique_ptr<std::byte[]> shared(g.shared_bytes > 0 ? new std::byte[g.shared_bytes + tail] : nullptr);
  detail::t_dynamic_shared = shared.get();
  detail::t_block_dim = g.block;
  detail::t_grid_dim = g.grid;
  Block block(g, stacks);
  const uint64_t launch_seed = mix(seed() ^ mix(g.launch_index));
  for (unsigned z = 0; z < g.grid.z; ++z) {
    for (unsigned y = 0; y < g.grid.y; ++y) {
      for (unsigned x = 0; x < g.grid.x; ++x) {
        if (shared) std::memset(shared.get(), 0xff, g.shared_bytes + tail);
        const uint64_t linear = (static_cast<uint64_t>(z) * g.grid.y + y) * g.grid.x + x;
        std::string what;
        cudaError_t error = cudaErrorLaunchFailure;
        if (!block.run({x, y, z}, mix(launch_seed ^ linear))) {
          what = block.what();
        } else if (shared) {
          for (size_t i = 0; i < tail; ++i) {
            if (shared[g.shared_bytes + i] != std::byte{0xff}) {
              char buf[256];
              std::snprintf(buf, sizeof buf,
                            "kernel %s, block (%u,%u,%u) wrote %zu bytes past its %zu bytes of dynamic shared memory",
                            g.name, x, y, z, i, g.shared_bytes);
              what = buf;
              error = cudaErrorIllegalAddress;
              break;
            }
          }
        }
        if (!what.empty()) {
          fault(g.device, error, what);
          detail::t_dynamic_shared = nullptr;
          return;
        }
      }
    }
  }
  detail::t_dynamic_shared = nullptr;
}

}  // namespace hearth::emu
