// The emulated device's execution model itself (kernels/cuda/emu), with small kernels of
// its own: launch limits refused as the driver refuses them, warp shuffles of every kind
// and width giving CUDA's source lanes, a race between threads showing under the shuffled
// order and gone with the barrier, atomics across blocks, the int8 and f16 mma.sync
// against plain products, and a divergent barrier, a bad warp mask or an mma.sync without its whole
// warp reported as a fault that sticks to the device. Built into cuda_test in an
// emulated build only.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/reduce.cuh"

namespace hearth {
namespace {

constexpr unsigned kFull = 0xffffffffu;

template <typename T>
T* device_copy(const std::vector<T>& v) {
  T* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> host_copy(const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

__global__ void nothing_kernel() {}

// Every thread writes its own slot, then reads another's: correct only with the barrier.
__global__ void rotate_kernel(const float* in, float* out, bool barrier) {
  HEARTH_DYNAMIC_SHARED(float, s);
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  if (barrier) __syncthreads();
  out[t] = s[(t + 37) % blockDim.x];
}

// Lane l's value is l; each kind of shuffle at each width.
__global__ void shuffle_kernel(int width, int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  int* o = out + threadIdx.x * 4;
  o[0] = __shfl_sync(kFull, lane, 5, width);
  o[1] = __shfl_up_sync(kFull, lane, 3, width);
  o[2] = __shfl_down_sync(kFull, lane, 3, width);
  o[3] = __shfl_xor_sync(kFull, lane, 6, width);
}

// Each lane names its own source: a rotation by one.
__global__ void rotate_lanes_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  out[threadIdx.x] = __shfl_sync(kFull, lane, (lane + 1) % 32);
}

// Lanes 16..31 exit first; the rest reduce over a full mask, which CUDA allows since
// only the lanes that have not exited must take part.
__global__ void half_warp_sum_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  if (lane >= 16) return;
  int v = lane;
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  out[lane] = v;
}

// Warp 1 writes a shared value after four collectives, warp 0 reads it after four of its
// own, with no barrier between: a race whose outcome depends on which warp runs ahead.
__global__ void run_ahead_kernel(int* out) {
  HEARTH_DYNAMIC_SHARED(int, s);
  if (threadIdx.x == 0) s[0] = 1;
  __syncthreads();
  int v = static_cast<int>(threadIdx.x);
  for (int i = 0; i < 4; ++i) v += __shfl_xor_sync(kFull, v, 1);
  if (threadIdx.x == 32) s[0] = 2;
  out[threadIdx.x] = s[0] + 0 * v;
}

__global__ void count_kernel(int* counter, float* sum) {
  atomicAdd(counter, 1);
  atomicAdd(sum, 0.5f);
}

__global__ void divergent_barrier_kernel() {
  if (threadIdx.x == 3) return;
  __syncthreads();
}

// Each warp w of the block multiplies its own A (16 x 32, row-major, at a + 512 w) by its
// own B (32 x 8, b[k * 8 + n], at b + 256 w) onto C, its fragments gathered by the PTX
// ISA's table for mma.m16n8k32 (written out here apart from the emulator's), and
// scatters D the same way.
__global__ void mma_kernel(const int8_t* a, const int8_t* b, const int32_t* c, int32_t* d) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  a += 512 * warp;
  b += 256 * warp;
  c += 128 * warp;
  d += 128 * warp;
  auto pack = [](const int8_t* p, int step) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i * step])) << (8 * i);
    return v;
  };
  const uint32_t fa[4] = {pack(a + g * 32 + 4 * t, 1), pack(a + (g + 8) * 32 + 4 * t, 1),
                          pack(a + g * 32 + 4 * t + 16, 1), pack(a + (g + 8) * 32 + 4 * t + 16, 1)};
  const uint32_t fb[2] = {pack(b + (4 * t) * 8 + g, 8), pack(b + (4 * t + 16) * 8 + g, 8)};
  int32_t acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
  hearth::kernels::cuda::mma_s8_m16n8k32(acc, fa, fb);
  for (int i = 0; i < 4; ++i) d[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = acc[i];
}

// The same for f16: A 16 x 16 at a + 256 w, B 16 x 8 (b[k * 8 + n]) at b + 128 w, f32 C
// and D, by the PTX ISA's table for mma.m16n8k16.
__global__ void mma_f16_kernel(const uint16_t* a, const uint16_t* b, const float* c, float* d) {
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  a += 256 * warp;
  b += 128 * warp;
  c += 128 * warp;
  d += 128 * warp;
  auto pack = [](const uint16_t* p, int step) { return p[0] | static_cast<uint32_t>(p[step]) << 16; };
  const uint32_t fa[4] = {pack(a + g * 16 + 2 * t, 1), pack(a + (g + 8) * 16 + 2 * t, 1),
                          pack(a + g * 16 + 2 * t + 8, 1), pack(a + (g + 8) * 16 + 2 * t + 8, 1)};
  const uint32_t fb[2] = {pack(b + (2 * t) * 8 + g, 8), pack(b + (2 * t + 8) * 8 + g, 8)};
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)];
  hearth::kernels::cuda::mma_f16_m16n8k16(acc, fa, fb);
  for (int i = 0; i < 4; ++i) d[(g + (i >= 2 ? 8 : 0)) * 8 + 2 * t + (i & 1)] = acc[i];
}

__global__ void mma_after_exit_kernel() {
  if (threadIdx.x == 3) return;
  int32_t d[4] = {};
  const uint32_t a[4] = {}, b[2] = {};
  hearth::kernels::cuda::mma_s8_m16n8k32(d, a, b);
}

__global__ void bad_mask_kernel(float* out) { out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 1); }

TEST(EmulatedDeviceTest, LaunchesBeyondAnSm90sLimitsAreRefusedAndDoNotStick) {
  cudaGetLastError();
  HEARTH_LAUNCH(nothing_kernel, dim3(1), dim3(1025), 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HEARTH_LAUNCH(nothing_kernel, dim3(1), dim3(32, 32, 2), 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HEARTH_LAUNCH(nothing_kernel, dim3(1, 65536), dim3(32), 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HEARTH_LAUNCH(nothing_kernel, dim3(0), dim3(32), 0, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  HEARTH_LAUNCH(nothing_kernel, dim3(1), dim3(32), (48u << 10) + 4, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is read once";
  HEARTH_LAUNCH(nothing_kernel, dim3(2), dim3(1024), 48u << 10, nullptr)();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmulatedDeviceTest, ShufflesTakeCudasSourceLanesAtEveryWidth) {
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 64 * 4 * sizeof(int)), cudaSuccess);
  for (int width : {32, 16, 8, 4}) {
    HEARTH_LAUNCH(shuffle_kernel, dim3(1), dim3(64), 0, nullptr)(width, out);
    const std::vector<int> got = host_copy(out, 64 * 4);
    for (int t = 0; t < 64; ++t) {
      const int lane = t % 32, base = lane / width * width;
      const int want[4] = {base + 5 % width, lane % width >= 3 ? lane - 3 : lane,
                           lane % width + 3 < width ? lane + 3 : lane, (lane ^ 6) < base + width ? lane ^ 6 : lane};
      for (int k = 0; k < 4; ++k) EXPECT_EQ(got[static_cast<size_t>(t * 4 + k)], want[k]) << "width " << width << " thread " << t << " shuffle " << k;
    }
  }
  cudaFree(out);
}

TEST(EmulatedDeviceTest, EachLaneNamesItsOwnSourceAndExitedLanesNeedNotArrive) {
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 64 * sizeof(int)), cudaSuccess);
  HEARTH_LAUNCH(rotate_lanes_kernel, dim3(1), dim3(64), 0, nullptr)(out);
  std::vector<int> got = host_copy(out, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(got[static_cast<size_t>(t)], (t % 32 + 1) % 32) << "thread " << t;
  HEARTH_LAUNCH(half_warp_sum_kernel, dim3(1), dim3(32), 0, nullptr)(out);
  got = host_copy(out, 16);
  for (int lane = 0; lane < 16; ++lane) EXPECT_EQ(got[static_cast<size_t>(lane)], 120) << "lane " << lane;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
}

TEST(EmulatedDeviceTest, OneWarpCanRunFarAheadOfAnother) {
  int* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 64 * sizeof(int)), cudaSuccess);
  bool before = false, after = false;  // warp 0 read before / after warp 1's write
  for (int run = 0; run < 64 && !(before && after); ++run) {
    HEARTH_LAUNCH(run_ahead_kernel, dim3(1), dim3(64), sizeof(int), nullptr)(out);
    const int seen = host_copy(out, 1)[0];
    before = before || seen == 1;
    after = after || seen == 2;
  }
  EXPECT_TRUE(before && after) << "both orders of the race should come up within 64 launches";
  cudaFree(out);
}

TEST(EmulatedDeviceTest, ARaceShowsUnderTheShuffledOrderAndTheBarrierEndsIt) {
  constexpr int kThreads = 256;
  std::vector<float> in(kThreads);
  for (int i = 0; i < kThreads; ++i) in[static_cast<size_t>(i)] = static_cast<float>(i);
  float* din = device_copy(in);
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dout, kThreads * sizeof(float)), cudaSuccess);
  for (bool barrier : {false, true}) {
    int wrong = 0;
    for (int run = 0; run < 8; ++run) {
      HEARTH_LAUNCH(rotate_kernel, dim3(1), dim3(kThreads), kThreads * sizeof(float), nullptr)(din, dout, barrier);
      const std::vector<float> got = host_copy(dout, kThreads);
      for (int t = 0; t < kThreads; ++t) wrong += got[static_cast<size_t>(t)] != static_cast<float>((t + 37) % kThreads);
    }
    if (barrier) {
      EXPECT_EQ(wrong, 0);
    } else {
      // Each run, about half the threads run before the thread whose slot they read.
      EXPECT_GT(wrong, 8 * kThreads / 4) << "the thread order is not shuffled";
    }
  }
  cudaFree(din);
  cudaFree(dout);
}

TEST(EmulatedDeviceTest, AtomicsAddUpAcrossBlocks) {
  int* counter = device_copy(std::vector<int>{0});
  float* sum = device_copy(std::vector<float>{0.0f});
  HEARTH_LAUNCH(count_kernel, dim3(37), dim3(96), 0, nullptr)(counter, sum);
  EXPECT_EQ(host_copy(counter, 1)[0], 37 * 96);
  EXPECT_EQ(host_copy(sum, 1)[0], 37 * 96 * 0.5f);
  cudaFree(counter);
  cudaFree(sum);
}

TEST(EmulatedDeviceTest, Int8MmaIsTheExactProductOfThePtxFragments) {
  std::mt19937 rng(7);
  constexpr int kWarps = 3;
  std::vector<int8_t> a(512 * kWarps), b(256 * kWarps);
  std::vector<int32_t> c(128 * kWarps);
  for (auto& v : a) v = static_cast<int8_t>(rng() % 256);
  for (auto& v : b) v = static_cast<int8_t>(rng() % 256);
  for (auto& v : c) v = static_cast<int32_t>(rng() % 2000001) - 1000000;
  a[0] = b[0] = -128;  // the extremes
  a[1] = b[8] = 127;
  int8_t* da = device_copy(a);
  int8_t* db = device_copy(b);
  int32_t* dc = device_copy(c);
  int32_t* dd = device_copy(std::vector<int32_t>(c.size(), 0x7fffffff));
  HEARTH_LAUNCH(mma_kernel, dim3(1), dim3(32 * kWarps), 0, nullptr)(da, db, dc, dd);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int32_t> d = host_copy(dd, c.size());
  for (int w = 0; w < kWarps; ++w) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 8; ++n) {
        int32_t want = c[static_cast<size_t>(128 * w + m * 8 + n)];
        for (int k = 0; k < 32; ++k) {
          want += a[static_cast<size_t>(512 * w + m * 32 + k)] * b[static_cast<size_t>(256 * w + k * 8 + n)];
        }
        EXPECT_EQ(d[static_cast<size_t>(128 * w + m * 8 + n)], want) << "warp " << w << ", D[" << m << "][" << n << "]";
      }
    }
  }
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd)}) {
    cudaFree(p);
  }
}

TEST(EmulatedDeviceTest, F16MmaIsTheProductOfThePtxFragments) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  constexpr int kWarps = 2;
  std::vector<uint16_t> a(256 * kWarps), b(128 * kWarps);
  std::vector<float> c(128 * kWarps);
  for (auto& v : a) v = f32_to_fp16(dist(rng));
  for (auto& v : b) v = f32_to_fp16(dist(rng));
  for (auto& v : c) v = dist(rng);
  uint16_t* da = device_copy(a);
  uint16_t* db = device_copy(b);
  float* dc = device_copy(c);
  float* dd = device_copy(std::vector<float>(c.size(), NAN));
  HEARTH_LAUNCH(mma_f16_kernel, dim3(1), dim3(32 * kWarps), 0, nullptr)(da, db, dc, dd);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> d = host_copy(dd, c.size());
  for (int w = 0; w < kWarps; ++w) {
    for (int m = 0; m < 16; ++m) {
      for (int n = 0; n < 8; ++n) {
        double want = c[static_cast<size_t>(128 * w + m * 8 + n)], magnitude = std::fabs(want);
        for (int k = 0; k < 16; ++k) {
          const double p = static_cast<double>(fp16_to_f32(a[static_cast<size_t>(256 * w + m * 16 + k)])) *
                           fp16_to_f32(b[static_cast<size_t>(128 * w + k * 8 + n)]);
          want += p;
          magnitude += std::fabs(p);
        }
        EXPECT_NEAR(d[static_cast<size_t>(128 * w + m * 8 + n)], want, 1e-6 * magnitude)
            << "warp " << w << ", D[" << m << "][" << n << "]";
      }
    }
  }
  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(dd)}) {
    cudaFree(p);
  }
}

// A fault sticks to the device, so these run in a child process of their own.
TEST(EmulatedDeviceDeathTest, ADivergentBarrierIsReportedAsTheHangItWouldBe) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        HEARTH_LAUNCH(divergent_barrier_kernel, dim3(1), dim3(64), 0, nullptr)();
        const bool failed = cudaDeviceSynchronize() == cudaErrorLaunchFailure;
        const bool sticks = cudaMemset(nullptr, 0, 0) == cudaErrorLaunchFailure;
        std::exit(failed && sticks ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "divergent_barrier_kernel, block \\(0,0,0\\) would hang on a GPU: __syncthreads "
                                    "reached by 63 of 64 threads \\(1 have exited");
}

TEST(EmulatedDeviceDeathTest, AWarpMaskThatLeavesOutItsCallerIsAFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        float* out = nullptr;
        if (cudaMalloc(&out, 32 * sizeof(float)) != cudaSuccess) std::exit(2);
        HEARTH_LAUNCH(bad_mask_kernel, dim3(1), dim3(32), 0, nullptr)(out);
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "__shfl_xor_sync with mask 0x0000ffff, which leaves out the calling lane");
}

TEST(EmulatedDeviceDeathTest, AnMmaWithoutItsWholeWarpIsAFault) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        HEARTH_LAUNCH(mma_after_exit_kernel, dim3(1), dim3(16), 0, nullptr)();
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "mma.sync in warp 0, which has lanes 0x0000ffff, not all 32");
  EXPECT_EXIT(
      {
        HEARTH_LAUNCH(mma_after_exit_kernel, dim3(1), dim3(32), 0, nullptr)();
        std::exit(cudaDeviceSynchronize() == cudaErrorLaunchFailure ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "reach an mma.sync that lanes 0x00000008 have exited before");
}

}  // namespace
}  // namespace hearth
