// The group-quantized (GPTQ-layout) product on the device against the reference: the
// matrix dequantized by kernels::ref::dequantize_group_quant, multiplied in float; on each
// path (streaming, tensor cores, the choice by token count), at shapes on and off the
// tensor-core tiles' edges.
// Skipped without a device.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cuda/device_info.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "kernels/reference/reference.h"
#include "tests/unit/kernels/group_quant_matrix.h"

namespace hearth {
namespace {

namespace cu = kernels::cuda;

template <typename T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  if (v.empty()) return nullptr;
  EXPECT_EQ(cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return p;
}

TEST(GroupQuantCudaTest, ProductsMatchTheDequantizedReference) {
  if (cu::device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: this test needs one";
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
#if HEARTH_CUDA_EMU
  std::printf("HEARTH_EMU_SEED=%llu (the emulated device's thread order)\n",
              static_cast<unsigned long long>(emu::seed()));
#endif
  std::mt19937 rng(seed);
  struct Shape {
    int64_t rows, cols;
    int32_t bits, group;
    bool act_order;
    int64_t tokens;
  };
  for (const Shape& s : {Shape{8, 32, 4, 32, false, 1}, Shape{136, 384, 4, 128, true, 3},
                         Shape{264, 640, 8, 64, false, 9}, Shape{520, 1024, 4, 128, true, 17},
                         Shape{4, 264, 8, 32, true, 8}, Shape{72, 200, 4, 40, true, 64},
                         Shape{128, 256, 8, 128, false, 65}, Shape{136, 96, 4, 32, false, 130}}) {
    auto m = testing::make_group_quant(s.rows, s.cols, s.bits, s.group, s.act_order, rng);
    std::vector<float> w(static_cast<size_t>(s.rows * s.cols));
    kernels::ref::dequantize_group_quant(m.view, w.data());
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(s.tokens * s.cols));
    for (float& v : x) v = dist(rng);
    std::vector<float> want(static_cast<size_t>(s.tokens * s.rows));
    kernels::ref::matmul(DType::kF32, w.data(), s.rows, s.cols, x.data(), s.tokens, want.data());

    kernels::dev::GroupQuantView d = m.view;
    d.qweight = upload(m.qweight);
    d.qzeros = upload(m.qzeros);
    d.scales = upload(m.scales);
    d.g_idx = s.act_order ? upload(m.g_idx) : nullptr;
    float* dx = upload(x);
    float* dy = upload(std::vector<float>(want.size(), NAN));
    for (const cu::MatmulPath path : {cu::MatmulPath::kStreaming, cu::MatmulPath::kTensorCores, cu::MatmulPath::kAuto}) {
      // Poisoned: every output is written.
      ASSERT_EQ(cudaMemcpy(dy, std::vector<float>(want.size(), NAN).data(), want.size() * sizeof(float),
                           cudaMemcpyHostToDevice),
                cudaSuccess);
      ASSERT_EQ(cu::matmul_group_quant(d, dx, s.tokens, dy, nullptr, path), cudaSuccess);
      // Float sums, or on tensor cores the weights and activations rounded to f16 (2^-11
      // each), products summed in f32: within 1.1e-3 of the sum of the products' sizes.
      const bool f16 = path == cu::MatmulPath::kTensorCores ||
                       (path == cu::MatmulPath::kAuto && s.tokens >= cu::kGroupQuantMmaMinTokens);
      const double rel = f16 ? 1.1e-3 : 1e-5;
      std::vector<float> got(want.size());
      ASSERT_EQ(cudaMemcpy(got.data(), dy, got.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      for (int64_t t = 0; t < s.tokens; ++t) {
        for (int64_t r = 0; r < s.rows; ++r) {
          double magnitude = 0;
          for (int64_t c = 0; c < s.cols; ++c) magnitude += std::fabs(w[r * s.cols + c] * x[t * s.cols + c]);
          const size_t i = static_cast<size_t>(t * s.rows + r);
          ASSERT_NEAR(got[i], want[i], rel * magnitude + 1e-6)
              << "rows " << s.rows << " cols " << s.cols << " bits " << s.bits << " token " << t << " row " << r
              << (f16 ? " on tensor cores" : " streaming");
        }
      }
    }
    for (const void* p : {static_cast<const void*>(d.qweight), static_cast<const void*>(d.qzeros),
                          static_cast<const void*>(d.scales), static_cast<const void*>(d.g_idx),
                          static_cast<const void*>(dx), static_cast<const void*>(dy)}) {
      cudaFree(const_cast<void*>(p));
    }
  }
  // Shapes the kernel cannot take are refused, not run.
  kernels::dev::GroupQuantView bad{};
  bad.rows = 8;
  bad.cols = 30;
  bad.bits = 4;
  EXPECT_EQ(cu::matmul_group_quant(bad, nullptr, 1, nullptr, nullptr), cudaErrorInvalidValue);
  bad.cols = 32;
  bad.bits = 3;
  EXPECT_EQ(cu::matmul_group_quant(bad, nullptr, 1, nullptr, nullptr), cudaErrorNotSupported);
}

}  // namespace
}  // namespace hearth
