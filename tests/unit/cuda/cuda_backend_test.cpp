// Every op of the CUDA backend against the CPU backend, on random inputs (fresh each
// run; the seed is printed), ragged shapes and outputs poisoned with NaN beforehand, each
// with its own tolerance; then the stories260K model's ground truth on the device. Built
// whenever nvcc is found; every test skips, saying so, on a machine without a CUDA
// device (bench/device_check.sh runs them on one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "common/half.h"
#include "engine/backends.h"
#include "engine/core/backend.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/core/driver.h"
#include "engine/core/sampler.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "loader/lora.h"
#include "loader/model.h"
#include "loader/synth.h"
#include "loader/quantize.h"
#include "tests/test_util.h"
#if HEARTH_CUDA_EMU
#include <cuda_runtime.h>  // the emulated device's seed
#endif

namespace hearth {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kernels::cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device on this machine: the CUDA backend's op tests need one "
                      "(bench/device_check.sh runs them where there is)";
    }
    auto b = make_backend("cuda");
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    gpu_ = std::move(b).value();
    cpu_ = make_cpu_backend({.threads = 1});
    const uint32_t seed = std::random_device{}();
    std::printf("seed %u\n", seed);
#if HEARTH_CUDA_EMU
    std::printf("HEARTH_EMU_SEED=%llu (the emulated device's thread order)\n",
                static_cast<unsigned long long>(emu::seed()));
#endif
    rng_.seed(seed);
  }

  // A buffer of `be` holding `host` (floats or ints).
  template <typename T>
  BackendBuffer upload(Backend& be, const std::vector<T>& host) {
    auto buf = be.alloc(host.size() * sizeof(T));
    EXPECT_TRUE(buf.is_ok()) << buf.status().to_string();
    be.write(buf.value(), 0, host.data(), host.size() * sizeof(T));
    return std::move(buf).value();
  }
  // A buffer of n floats, every one NaN: an op that leaves an output unwritten shows.
  BackendBuffer poisoned(Backend& be, size_t n) { return upload(be, std::vector<float>(n, kNaN)); }
  template <typename T = float>
  std::vector<T> download(Backend& be, const BackendBuffer& buf, size_t n) {
    std::vector<T> out(n);
    be.read(buf, 0, out.data(), n * sizeof(T));
    return out;
  }

  static void expect_near(const std::vector<float>& got, const std::vector<float>& want, float tol,
                          const std::string& what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_FALSE(std::isnan(got[i])) << what << ": element " << i << " was not written";
      ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << ": element " << i;
    }
  }

  std::unique_ptr<Backend> gpu_, cpu_;
  std::mt19937 rng_;
};

// Bytes of a [rows, cols] matrix of `type` made from random values.
std::vector<std::byte> encode_matrix(DType type, const std::vector<float>& x) {
  if (type == DType::kF32) {
    std::vector<std::byte> out(x.size() * 4);
    std::memcpy(out.data(), x.data(), out.size());
    return out;
  }
  if (type == DType::kF16 || type == DType::kBF16) {
    std::vector<std::byte> out(x.size() * 2);
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t h = type == DType::kF16 ? f32_to_fp16(x[i]) : f32_to_bf16(x[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
    return out;
  }
  return quantize(type, x);
}

TensorView matrix_view(const std::vector<std::byte>& bytes, DType type, int64_t rows, int64_t cols) {
  TensorView t;
  t.name = "w";
  t.dtype = type;
  t.n_dims = 2;
  t.shape = {rows, cols, 0, 0};
  t.data = bytes.data();
  t.bytes = bytes.size();
  return t;
}

TEST_F(CudaBackendTest, MatmulOfEveryWeightTypeMatchesTheCpu) {
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  for (DType type : types) {
    for (int64_t n : {1, 3, 8, 9, 17, 33}) {  // 8 or more take cuBLASLt for 16-bit weights
      const int64_t rows = 1 + static_cast<int64_t>(rng_() % 300), cols = 32 * (1 + static_cast<int64_t>(rng_() % 40));
      const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(rows * cols), rng_));
      const TensorView host = matrix_view(bytes, type, rows, cols);
      auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
      ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
      const TensorView& dev = (*bound)->tensors()[0];
      const auto x = random_floats(static_cast<size_t>(n * cols), rng_, 2.0f);
      std::vector<float> want(static_cast<size_t>(n * rows));
      cpu_->matmul(host, x.data(), n, want.data());
      const BackendBuffer xd = upload(*gpu_, x);
      const BackendBuffer yd = poisoned(*gpu_, want.size());
      gpu_->matmul(dev, xd.f32(), n, yd.f32());
      // 16-bit weights over 8 or more tokens round the activations to the weights' type
      // for cuBLASLt: the tolerance is that rounding's, relative to the row's magnitude.
      const bool rounded = (type == DType::kF16 || type == DType::kBF16) && n >= 8;
      const float tol = rounded ? (type == DType::kF16 ? 2e-3f : 1.6e-2f) * std::sqrt(static_cast<float>(cols)) : 1e-4f;
      expect_near(download(*gpu_, yd, want.size()), want, tol,
                  fmt::format("{} [{}, {}] x {} tokens", dtype_name(type), rows, cols, n));
    }
  }
}

// The weight-streaming products at every token count around their groups of
// kMatvecTokens, called directly (the backend hands 16-bit weights over 8+ tokens to
// cuBLASLt): each float type with 16-byte-aligned activations (16-byte reads) and with
// activations one float off (element reads), and Q8_0/Q4_0, against the CPU.
TEST_F(CudaBackendTest, WeightStreamingProductsMatchTheCpuAtEveryTokenCount) {
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  for (DType type : types) {
    const bool quantized = type == DType::kQ8_0 || type == DType::kQ4_0;
    // 36 columns of a 16-bit type are rows of 72 bytes: element reads even when aligned.
    for (const int64_t cols : {32 * (1 + static_cast<int64_t>(rng_() % 24)), int64_t{36}}) {
      if (quantized && cols % 32 != 0) continue;
      const int64_t rows = 1 + static_cast<int64_t>(rng_() % 70);
      const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(rows * cols), rng_));
      const TensorView host = matrix_view(bytes, type, rows, cols);
      auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
      ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
      const TensorView& dev = (*bound)->tensors()[0];
      for (const int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 20}) {
        const auto x = random_floats(static_cast<size_t>(n * cols), rng_, 2.0f);
        std::vector<float> want(static_cast<size_t>(n * rows));
        cpu_->matmul(host, x.data(), n, want.data());
        for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
          if (quantized && offset == 1) continue;  // the activations are requantized into aligned scratch
          std::vector<float> shifted(static_cast<size_t>(offset));
          shifted.insert(shifted.end(), x.begin(), x.end());
          const BackendBuffer xd = upload(*gpu_, shifted);
          const BackendBuffer yd = poisoned(*gpu_, want.size());
          const size_t scratch_bytes = kernels::cuda::matmul_scratch_bytes(type, n, cols);
          const BackendBuffer scratch = poisoned(*gpu_, scratch_bytes / sizeof(float) + 1);
          const kernels::cuda::MatmulParams p{.type = type,
                                              .w = dev.data,
                                              .rows = rows,
                                              .cols = cols,
                                              .x = xd.f32() + offset,
                                              .n_tokens = n,
                                              .y = yd.f32(),
                                              .scratch = scratch.f32(),
                                              .scratch_bytes = scratch_bytes,
                                              .path = kernels::cuda::MatmulPath::kStreaming};
          const auto stream = static_cast<cudaStream_t>(gpu_->queue().handle);
          if (quantized) {  // blocks at an odd address, or scratch off 16 bytes: refused, nothing launched
            kernels::cuda::MatmulParams odd = p;
            odd.w = static_cast<const std::byte*>(dev.data) + 1;
            EXPECT_EQ(kernels::cuda::matmul(odd, stream), cudaErrorInvalidValue);
            odd = p;
            odd.scratch = scratch.f32() + 1;
            EXPECT_EQ(kernels::cuda::matmul(odd, stream), cudaErrorInvalidValue);
          }
          ASSERT_EQ(kernels::cuda::matmul(p, stream), cudaSuccess);
          expect_near(download(*gpu_, yd, want.size()), want, 1e-4f,
                      fmt::format("{} [{}, {}] x {} tokens, activations {} floats off 16 bytes", dtype_name(type), rows,
                                  cols, n, offset));
        }
      }
    }
  }
}

// The streaming products split over their columns (split-K) where their rows are too
// few for the device's SMs: every type, a range count the device's 132 SMs give, ragged
// last ranges, 16-byte and element reads, against the CPU; too little scratch for the
// ranges' sums is refused.
TEST_F(CudaBackendTest, SplitStreamingProductsMatchTheCpu) {
  constexpr int32_t kSms = 132;
  const DType types[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  for (DType type : types) {
    const bool quantized = type == DType::kQ8_0 || type == DType::kQ4_0;
    for (const int64_t cols : {int64_t{2048}, int64_t{3104}}) {
      const int64_t rows = 1 + static_cast<int64_t>(rng_() % 40);
      const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(rows * cols), rng_));
      const TensorView host = matrix_view(bytes, type, rows, cols);
      auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
      ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
      const TensorView& dev = (*bound)->tensors()[0];
      for (const int64_t n : {1, 3, 9}) {
        ASSERT_GT(kernels::cuda::matvec_splits(rows, n, cols, kSms), 1) << "the shape splits";
        const auto x = random_floats(static_cast<size_t>(n * cols), rng_, 2.0f);
        std::vector<float> want(static_cast<size_t>(n * rows));
        cpu_->matmul(host, x.data(), n, want.data());
        for (const int64_t offset : {int64_t{0}, int64_t{1}}) {
          if (quantized && offset == 1) continue;
          std::vector<float> shifted(static_cast<size_t>(offset));
          shifted.insert(shifted.end(), x.begin(), x.end());
          const BackendBuffer xd = upload(*gpu_, shifted);
          const BackendBuffer yd = poisoned(*gpu_, want.size());
          kernels::cuda::MatmulParams p{.type = type, .w = dev.data, .rows = rows, .cols = cols,
                                        .x = xd.f32() + offset, .n_tokens = n, .y = yd.f32(),
                                        .path = kernels::cuda::MatmulPath::kStreaming, .sm_count = kSms};
          p.scratch_bytes = kernels::cuda::matmul_scratch_bytes(p);
          ASSERT_GT(p.scratch_bytes, kernels::cuda::matmul_scratch_bytes(type, n, cols)) << "room for the sums";
          const BackendBuffer scratch = poisoned(*gpu_, p.scratch_bytes / sizeof(float) + 1);
          p.scratch = scratch.f32();
          const auto stream = static_cast<cudaStream_t>(gpu_->queue().handle);
          kernels::cuda::MatmulParams short_scratch = p;
          short_scratch.scratch_bytes = kernels::cuda::matmul_scratch_bytes(type, n, cols);
          EXPECT_EQ(kernels::cuda::matmul(short_scratch, stream), cudaErrorInvalidValue);
          ASSERT_EQ(kernels::cuda::matmul(p, stream), cudaSuccess);
          expect_near(download(*gpu_, yd, want.size()), want, 1e-4f,
                      fmt::format("{} [{}, {}] x {} tokens in {} ranges, activations {} floats off 16 bytes",
                                  dtype_name(type), rows, cols, n, kernels::cuda::matvec_splits(rows, n, cols, kSms),
                                  offset));
          if (offset == 0 && (quantized || type == DType::kF32 || n < 8)) {
            // And through the backend, which splits by its device's SMs (132 emulated) where
            // cuBLASLt does not take the product.
            const BackendBuffer yb = poisoned(*gpu_, want.size());
            gpu_->matmul(dev, xd.f32(), n, yb.f32());
            expect_near(download(*gpu_, yb, want.size()), want, 1e-4f,
                        fmt::format("{} [{}, {}] x {} tokens through the backend", dtype_name(type), rows, cols, n));
          }
        }
      }
    }
  }
}

// The tensor-core products of Q8_0/Q4_0 (int8 mma.sync) at the edges of their tiles of
// kQuantMmaRows rows by kQuantMmaTokens tokens and of their stages of
// kQuantMmaStageBlocks blocks: rows, tokens and blocks short of, at and past a multiple,
// forced onto tensor cores from one token, and chosen by the token count (kAuto) at the
// counts where the choice changes, against the CPU.
TEST_F(CudaBackendTest, TensorCoreProductsMatchTheCpuAtEveryTileEdge) {
  using kernels::cuda::MatmulPath;
  struct Shape {
    int64_t rows, cols;
  };
  const Shape shapes[] = {{1, 32}, {16, 96}, {64, 128}, {70, 160}, {130, 544}};
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (const Shape& shape : shapes) {
      const int64_t rows = shape.rows, cols = shape.cols;
      const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(rows * cols), rng_));
      const TensorView host = matrix_view(bytes, type, rows, cols);
      auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
      ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
      const TensorView& dev = (*bound)->tensors()[0];
      for (const int64_t n : {int64_t{1}, int64_t{9}, kernels::cuda::kQuantMmaMinTokens - 1,
                              kernels::cuda::kQuantMmaMinTokens, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{130}}) {
        const auto x = random_floats(static_cast<size_t>(n * cols), rng_, 2.0f);
        std::vector<float> want(static_cast<size_t>(n * rows));
        cpu_->matmul(host, x.data(), n, want.data());
        for (const MatmulPath path : {MatmulPath::kTensorCores, MatmulPath::kAuto}) {
          const BackendBuffer xd = upload(*gpu_, x);
          const BackendBuffer yd = poisoned(*gpu_, want.size());
          const size_t scratch_bytes = kernels::cuda::matmul_scratch_bytes(type, n, cols);
          const BackendBuffer scratch = poisoned(*gpu_, scratch_bytes / sizeof(float) + 1);
          const kernels::cuda::MatmulParams p{.type = type,
                                              .w = dev.data,
                                              .rows = rows,
                                              .cols = cols,
                                              .x = xd.f32(),
                                              .n_tokens = n,
                                              .y = yd.f32(),
                                              .scratch = scratch.f32(),
                                              .scratch_bytes = scratch_bytes,
                                              .path = path};
          ASSERT_EQ(kernels::cuda::matmul(p, static_cast<cudaStream_t>(gpu_->queue().handle)), cudaSuccess);
          expect_near(download(*gpu_, yd, want.size()), want, 1e-4f,
                      fmt::format("{} [{}, {}] x {} tokens, {}", dtype_name(type), rows, cols, n,
                                  path == MatmulPath::kAuto ? "path by token count" : "tensor cores"));
        }
      }
    }
  }
}

// swiglu_matmul is swiglu then matmul: on the same device, the same activation left in
// gate and the same product, bit for bit, for the types it fuses (Q8_0/Q4_0, streaming
// and tensor cores, split over the columns where the rows are few) and those it does not
// (F32, and F16 through cuBLASLt from 8 tokens); a p.x other than gate, or a type no
// product takes, is refused with gate untouched; with no rows, gate still becomes the
// activation.
TEST_F(CudaBackendTest, SwigluIntoTheProductIsSwigluThenMatmulBitForBit) {
  for (const bool split : {false, true}) {
    for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kF32, DType::kF16}) {
      const int64_t rows = split ? 1 + static_cast<int64_t>(rng_() % 40) : 1 + static_cast<int64_t>(rng_() % 100);
      const int64_t cols = split ? 2048 : 32 * (1 + static_cast<int64_t>(rng_() % 12));
      const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(rows * cols), rng_));
      const TensorView host = matrix_view(bytes, type, rows, cols);
      auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
      ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
      const TensorView& dev = (*bound)->tensors()[0];
      for (const int64_t n : {int64_t{1}, int64_t{9}, int64_t{17}, int64_t{70}}) {
        const auto gate = random_floats(static_cast<size_t>(n * cols), rng_, 4.0f);
        const auto up = random_floats(gate.size(), rng_, 2.0f);
        const BackendBuffer ud = upload(*gpu_, up);
        const BackendBuffer g1 = upload(*gpu_, gate), g2 = upload(*gpu_, gate);
        const BackendBuffer y1 = poisoned(*gpu_, static_cast<size_t>(n * rows)),
                            y2 = poisoned(*gpu_, static_cast<size_t>(n * rows));
        gpu_->swiglu_matmul(dev, g1.f32(), ud.f32(), n, y1.f32());
        gpu_->swiglu(g2.f32(), ud.f32(), n * cols, g2.f32());
        gpu_->matmul(dev, g2.f32(), n, y2.f32());
        const std::string what = fmt::format("{} [{}, {}] x {} tokens", dtype_name(type), rows, cols, n);
        const auto a1 = download(*gpu_, g1, gate.size()), a2 = download(*gpu_, g2, gate.size());
        ASSERT_EQ(std::memcmp(a1.data(), a2.data(), a1.size() * 4), 0) << "the activation, " << what;
        const auto p1 = download(*gpu_, y1, static_cast<size_t>(n * rows)),
                   p2 = download(*gpu_, y2, static_cast<size_t>(n * rows));
        ASSERT_EQ(std::memcmp(p1.data(), p2.data(), p1.size() * 4), 0) << "the product, " << what;
      }
    }
  }
  float x = 0.0f, u = 0.0f;
  const kernels::cuda::MatmulParams p{.type = DType::kQ8_0, .rows = 1, .cols = 32, .x = &u, .n_tokens = 1};
  EXPECT_EQ(kernels::cuda::swiglu_matmul(p, &x, &u, nullptr), cudaErrorInvalidValue);
  const auto gate = random_floats(64, rng_, 4.0f), up = random_floats(64, rng_, 2.0f);
  std::vector<float> want = gate;
  cpu_->swiglu(want.data(), up.data(), 64, want.data());
  const BackendBuffer gd = upload(*gpu_, gate), ud = upload(*gpu_, up);
  const auto stream = static_cast<cudaStream_t>(gpu_->queue().handle);
  kernels::cuda::MatmulParams none{.type = DType::kQ4_0R16, .rows = 4, .cols = 32, .x = gd.f32(), .n_tokens = 2};
  EXPECT_EQ(kernels::cuda::swiglu_matmul(none, gd.f32(), ud.f32(), stream), cudaErrorNotSupported);
  ASSERT_EQ(download(*gpu_, gd, 64), gate) << "a refused product leaves gate as it was";
  none.type = DType::kQ8_0;
  none.rows = 0;
  ASSERT_EQ(kernels::cuda::swiglu_matmul(none, gd.f32(), ud.f32(), stream), cudaSuccess);
  expect_near(download(*gpu_, gd, 64), want, 1e-6f, "the activation of a product with no rows");
}

TEST_F(CudaBackendTest, TheCpuInterleavedLayoutIsRefusedNamingTheFlag) {
  const auto bound = gpu_->bind_weights({}, kLayoutCpuR16);
  EXPECT_EQ(bound.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(bound.status().message().find("--layout plain"), std::string::npos) << bound.status().message();
  EXPECT_FALSE(gpu_->supports(BackendOp::kMatmul, DType::kQ4_0R16));
  EXPECT_TRUE(gpu_->supports(BackendOp::kMatmul, DType::kQ4_0));
}

TEST_F(CudaBackendTest, EmbeddingOfEveryTypeMatchesTheCpu) {
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    const int64_t vocab = 50, dim = 96;
    const auto bytes = encode_matrix(type, random_floats(static_cast<size_t>(vocab * dim), rng_));
    const TensorView host = matrix_view(bytes, type, vocab, dim);
    auto bound = gpu_->bind_weights(std::span(&host, 1), kLayoutPlain);
    ASSERT_TRUE(bound.is_ok());
    const std::vector<TokenId> ids = {0, 49, 7, 7, 23};
    std::vector<float> want(ids.size() * dim);
    cpu_->embedding(host, ids.data(), static_cast<int64_t>(ids.size()), want.data());
    const BackendBuffer id = upload(*gpu_, ids);
    const BackendBuffer out = poisoned(*gpu_, want.size());
    gpu_->embedding((*bound)->tensors()[0], static_cast<const TokenId*>(id.data()), static_cast<int64_t>(ids.size()),
                    out.f32());
    expect_near(download(*gpu_, out, want.size()), want, 0.0f, fmt::format("embedding {}", dtype_name(type)));
  }
}

TEST_F(CudaBackendTest, NormsRopeAndElementwiseOpsMatchTheCpu) {
  const int64_t n = 1 + static_cast<int64_t>(rng_() % 9), dim = 2 * (1 + static_cast<int64_t>(rng_() % 600));
  const auto x = random_floats(static_cast<size_t>(n * dim), rng_, 3.0f);
  const auto y = random_floats(x.size(), rng_);
  const auto w = random_floats(static_cast<size_t>(dim), rng_);
  const BackendBuffer xd = upload(*gpu_, x), yd = upload(*gpu_, y), wd = upload(*gpu_, w);
  {  // rms_norm
    std::vector<float> want(x.size());
    cpu_->rms_norm(x.data(), w.data(), n, dim, 1e-5f, want.data());
    const BackendBuffer out = poisoned(*gpu_, x.size());
    gpu_->rms_norm(xd.f32(), wd.f32(), n, dim, 1e-5f, out.f32());
    expect_near(download(*gpu_, out, x.size()), want, 1e-5f, "rms_norm");
  }
  {  // add_rms_norm: x += delta, out = norm(x), out aliasing delta
    std::vector<float> hx = x, hd = y;
    cpu_->add_rms_norm(hx.data(), hd.data(), w.data(), n, dim, 1e-5f, hd.data());
    const BackendBuffer gx = upload(*gpu_, x), gd = upload(*gpu_, y);
    gpu_->add_rms_norm(gx.f32(), gd.f32(), wd.f32(), n, dim, 1e-5f, gd.f32());
    expect_near(download(*gpu_, gx, x.size()), hx, 1e-6f, "add_rms_norm residual");
    expect_near(download(*gpu_, gd, x.size()), hd, 1e-5f, "add_rms_norm output");
  }
  {  // swiglu, add, add_bias
    std::vector<float> want(x.size());
    cpu_->swiglu(x.data(), y.data(), n * dim, want.data());
    const BackendBuffer out = poisoned(*gpu_, x.size());
    gpu_->swiglu(xd.f32(), yd.f32(), n * dim, out.f32());
    expect_near(download(*gpu_, out, x.size()), want, 1e-5f, "swiglu");
    std::vector<float> sum = x;
    cpu_->add(sum.data(), y.data(), n * dim);
    const BackendBuffer s = upload(*gpu_, x);
    gpu_->add(s.f32(), yd.f32(), n * dim);
    expect_near(download(*gpu_, s, x.size()), sum, 0.0f, "add");
    std::vector<float> biased = x;
    cpu_->add_bias(biased.data(), w.data(), n, dim);
    const BackendBuffer b = upload(*gpu_, x);
    gpu_->add_bias(b.f32(), wd.f32(), n, dim);
    expect_near(download(*gpu_, b, x.size()), biased, 0.0f, "add_bias");
  }
  {  // scale, in place
    std::vector<float> want = x;
    cpu_->scale(want.data(), n * dim, 8.0f);
    const BackendBuffer sd = upload(*gpu_, x);
    gpu_->scale(sd.f32(), n * dim, 8.0f);
    expect_near(download(*gpu_, sd, x.size()), want, 0.0f, "scale");
  }
  {  // softcap in place, and rows scaled by a sigmoid gate each
    std::vector<float> want = x;
    cpu_->softcap(want.data(), n * dim, 2.5f);
    const BackendBuffer cd = upload(*gpu_, x);
    gpu_->softcap(cd.f32(), n * dim, 2.5f);
    expect_near(download(*gpu_, cd, x.size()), want, 1e-6f, "softcap");
    const auto g = random_floats(static_cast<size_t>(n), rng_, 4.0f);
    std::vector<float> gated = x;
    cpu_->sigmoid_gate_rows(gated.data(), g.data(), n, dim);
    const BackendBuffer gd = upload(*gpu_, x), gg = upload(*gpu_, g);
    gpu_->sigmoid_gate_rows(gd.f32(), gg.f32(), n, dim);
    expect_near(download(*gpu_, gd, x.size()), gated, 1e-6f, "sigmoid_gate_rows");
  }
  {  // layer_norm with and without bias, in place
    for (bool with_bias : {true, false}) {
      std::vector<float> want(x.size());
      cpu_->layer_norm(x.data(), w.data(), with_bias ? y.data() : nullptr, n, dim, 1e-5f, want.data());
      const BackendBuffer ld = upload(*gpu_, x);
      gpu_->layer_norm(ld.f32(), wd.f32(), with_bias ? yd.f32() : nullptr, n, dim, 1e-5f, ld.f32());
      expect_near(download(*gpu_, ld, x.size()), want, 2e-5f, "layer_norm");
    }
  }
  {  // gelu in both forms, of x alone and times y
    for (bool tanh_form : {false, true}) {
      for (bool gated : {false, true}) {
        std::vector<float> want(x.size());
        cpu_->gelu(x.data(), gated ? y.data() : nullptr, n * dim, tanh_form, want.data());
        const BackendBuffer out = poisoned(*gpu_, want.size());
        gpu_->gelu(xd.f32(), gated ? yd.f32() : nullptr, n * dim, tanh_form, out.f32());
        expect_near(download(*gpu_, out, want.size()), want, 1e-5f, "gelu");
      }
    }
  }
  {  // rope, both pairings, whole and partial, over heads of a head_dim that divides dim
    const int64_t head_dim = 2 * (1 + static_cast<int64_t>(rng_() % 64)), heads = 3;
    const int64_t rotary = rng_() % 2 == 0 ? head_dim : 2 * (1 + static_cast<int64_t>(rng_() % (head_dim / 2)));
    const auto q = random_floats(static_cast<size_t>(n * heads * head_dim), rng_);
    std::vector<int32_t> positions(static_cast<size_t>(n));
    for (auto& p : positions) p = static_cast<int32_t>(rng_() % 8192);
    std::vector<float> inv_freq(static_cast<size_t>(rotary / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / rotary);
    const BackendBuffer pd = upload(*gpu_, positions), fd = upload(*gpu_, inv_freq);
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      std::vector<float> want = q;
      cpu_->rope(want.data(), n, heads, head_dim, rotary, positions.data(), inv_freq.data(), style);
      const BackendBuffer qd = upload(*gpu_, q);
      gpu_->rope(qd.f32(), n, heads, head_dim, rotary, static_cast<const int32_t*>(pd.data()), fd.f32(), style);
      // Angles up to 8192 radians: the device's sinf/cosf after range reduction agree
      // with the host's to a few 1e-4 there.
      expect_near(download(*gpu_, qd, q.size()), want, 2e-3f, "rope");
    }
  }
  {  // moe_route and moe_combine: each of n tokens' top 2 of 8 experts, and their rows combined
    const int32_t experts = 8, k = 2;
    const auto logits = random_floats(static_cast<size_t>(n * experts), rng_, 4.0f);
    std::vector<int32_t> ids(static_cast<size_t>(n * k));
    std::vector<float> weights(ids.size());
    cpu_->moe_route(logits.data(), n, {experts, k, true}, ids.data(), weights.data());
    const BackendBuffer ld = upload(*gpu_, logits);
    const BackendBuffer id = poisoned(*gpu_, ids.size()), wd2 = poisoned(*gpu_, ids.size());
    gpu_->moe_route(ld.f32(), n, {experts, k, true}, static_cast<int32_t*>(id.data()), wd2.f32());
    {  // sigmoid scores, a bias on the choice (in device memory) and a scale
      const auto bias = random_floats(static_cast<size_t>(experts), rng_, 0.5f);
      std::vector<int32_t> sids(ids.size());
      std::vector<float> sw(ids.size());
      cpu_->moe_route(logits.data(), n, {experts, k, true, true, bias.data(), 2.5f}, sids.data(), sw.data());
      const BackendBuffer bd = upload(*gpu_, bias);
      const BackendBuffer sid = poisoned(*gpu_, ids.size()), swd = poisoned(*gpu_, ids.size());
      gpu_->moe_route(ld.f32(), n, {experts, k, true, true, bd.f32(), 2.5f}, static_cast<int32_t*>(sid.data()),
                      swd.f32());
      std::vector<int32_t> got(ids.size());
      gpu_->read(sid, 0, got.data(), got.size() * sizeof(int32_t));
      EXPECT_EQ(got, sids) << "sigmoid moe_route ids";
      expect_near(download(*gpu_, swd, sw.size()), sw, 1e-6f, "sigmoid moe_route weights");
    }
    std::vector<int32_t> got_ids(ids.size());
    gpu_->read(id, 0, got_ids.data(), got_ids.size() * sizeof(int32_t));
    EXPECT_EQ(got_ids, ids) << "moe_route ids";
    expect_near(download(*gpu_, wd2, weights.size()), weights, 1e-6f, "moe_route weights");
    std::vector<int32_t> pos(ids.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>(pos.size() - 1 - i);
    const auto rows = random_floats(static_cast<size_t>(n * k * dim), rng_);
    std::vector<float> want(static_cast<size_t>(n * dim));
    cpu_->moe_combine(rows.data(), pos.data(), weights.data(), n, k, dim, want.data());
    const BackendBuffer rd = upload(*gpu_, rows), pd = upload(*gpu_, pos), wd3 = upload(*gpu_, weights);
    const BackendBuffer out = poisoned(*gpu_, want.size());
    gpu_->moe_combine(rd.f32(), static_cast<const int32_t*>(pd.data()), wd3.f32(), n, k, dim, out.f32());
    expect_near(download(*gpu_, out, want.size()), want, 1e-5f, "moe_combine");
  }
  {  // gather_rows
    const std::vector<int32_t> rows = {static_cast<int32_t>(n - 1), 0};
    std::vector<float> want(rows.size() * dim);
    cpu_->gather_rows(x.data(), rows.data(), 2, dim, want.data());
    const BackendBuffer rd = upload(*gpu_, rows);
    const BackendBuffer out = poisoned(*gpu_, want.size());
    gpu_->gather_rows(xd.f32(), static_cast<const int32_t*>(rd.data()), 2, dim, out.f32());
    expect_near(download(*gpu_, out, want.size()), want, 0.0f, "gather_rows");
  }
  {  // permute_columns: a reversed, interleaved order of dim columns
    std::vector<int32_t> perm(static_cast<size_t>(dim));
    for (int64_t j = 0; j < dim; ++j) {
      perm[static_cast<size_t>(j)] = static_cast<int32_t>(j % 2 == 0 ? dim - 1 - j / 2 : j / 2);
    }
    std::vector<float> want(static_cast<size_t>(n * dim));
    cpu_->permute_columns(x.data(), n, dim, perm.data(), want.data());
    const BackendBuffer pd = upload(*gpu_, perm);
    const BackendBuffer out = poisoned(*gpu_, want.size());
    gpu_->permute_columns(xd.f32(), n, dim, static_cast<const int32_t*>(pd.data()), out.f32());
    expect_near(download(*gpu_, out, want.size()), want, 0.0f, "permute_columns");
  }
}

// A step of several sequences, a prefill chunk among decodes, over shuffled blocks.
struct RaggedStep {
  ModelInput input;
  int32_t n_blocks = 0;
};

RaggedStep ragged_step(std::mt19937& rng, int32_t block_size) {
  RaggedStep s;
  s.input.clear(block_size);
  const int32_t n_seqs = 1 + static_cast<int32_t>(rng() % 5);
  std::vector<std::vector<int32_t>> tables;
  int32_t next_block = 0;
  std::vector<std::pair<int32_t, int32_t>> shapes;  // (first position, tokens)
  for (int32_t i = 0; i < n_seqs; ++i) {
    const int32_t first = static_cast<int32_t>(rng() % 200);
    const int32_t tokens = i == 0 ? 1 + static_cast<int32_t>(rng() % 40) : 1;
    const int32_t blocks = (first + tokens + block_size - 1) / block_size;
    std::vector<int32_t> table(static_cast<size_t>(blocks));
    std::iota(table.begin(), table.end(), next_block);
    next_block += blocks;
    tables.push_back(std::move(table));
    shapes.emplace_back(first, tokens);
  }
  // Shuffle block ids across the whole cache.
  std::vector<int32_t> perm(static_cast<size_t>(next_block));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (int32_t i = 0; i < n_seqs; ++i) {
    for (auto& b : tables[static_cast<size_t>(i)]) b = perm[static_cast<size_t>(b)];
    std::vector<TokenId> ids(static_cast<size_t>(shapes[static_cast<size_t>(i)].second), 1);
    EXPECT_TRUE(s.input.add_sequence(ids, shapes[static_cast<size_t>(i)].first, tables[static_cast<size_t>(i)], true)
                    .is_ok());
  }
  s.n_blocks = next_block;
  return s;
}

// LoRA products over a batch whose rows use three adapter slots (ranks 5, 16 and 64, the
// middle one not adapting this matrix) and none; rows without one keep their values.
TEST_F(CudaBackendTest, LoraProductsOfMixedAdaptersMatchTheCpu) {
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{64, 64}, {67, 300}}) {
    const int32_t ranks[] = {5, 16, 64};
    const int32_t max_rank = 64;
    const int64_t n = 9;
    std::vector<std::vector<float>> a(3), b(3);
    std::vector<BackendBuffer> ad, bd;
    std::vector<kernels::LoraFactors> host(3), dev(3);
    for (size_t s = 0; s < 3; ++s) {
      a[s] = random_floats(static_cast<size_t>(ranks[s] * in), rng_);
      b[s] = random_floats(static_cast<size_t>(out * ranks[s]), rng_);
      ad.push_back(upload(*gpu_, a[s]));
      bd.push_back(upload(*gpu_, b[s]));
      host[s] = {a[s].data(), b[s].data(), ranks[s], 0.25f * static_cast<float>(s + 1)};
      dev[s] = {ad[s].f32(), bd[s].f32(), ranks[s], host[s].scale};
    }
    host[1].a = dev[1].a = nullptr;
    const std::vector<int32_t> slot = {2, -1, 0, 0, 1, 2, -1, 0, 2};
    const auto x = random_floats(static_cast<size_t>(n * in), rng_);
    const auto y = random_floats(static_cast<size_t>(n * out), rng_);
    std::vector<float> want = y, scratch(static_cast<size_t>(n * max_rank));
    cpu_->lora({.x = x.data(), .y = want.data(), .row_slot = slot.data(), .factors = host.data(),
                .scratch = scratch.data(), .n = n, .in = in, .out = out, .n_slots = 3, .max_rank = max_rank});
    auto table = gpu_->alloc(dev.size() * sizeof(kernels::LoraFactors));
    ASSERT_TRUE(table.is_ok());
    gpu_->write(*table, 0, dev.data(), dev.size() * sizeof(kernels::LoraFactors));
    const BackendBuffer xd = upload(*gpu_, x), yd = upload(*gpu_, y), sd = upload(*gpu_, slot),
                        scratch_d = poisoned(*gpu_, static_cast<size_t>(n * max_rank));
    gpu_->lora({.x = xd.f32(), .y = yd.f32(), .row_slot = static_cast<const int32_t*>(sd.data()),
                .factors = static_cast<const kernels::LoraFactors*>(table->data()), .scratch = scratch_d.f32(),
                .n = n, .in = in, .out = out, .n_slots = 3, .max_rank = max_rank});
    const std::vector<float> got = download(*gpu_, yd, y.size());
    expect_near(got, want, 2e-5f * static_cast<float>(in), fmt::format("lora {}x{}", in, out));
    for (int64_t t : {1, 4, 6}) {  // no adapter, or one that leaves this matrix alone: untouched bits
      for (int64_t o = 0; o < out; ++o) ASSERT_EQ(got[static_cast<size_t>(t * out + o)], y[static_cast<size_t>(t * out + o)]);
    }
  }
}

// rope_kv_store is rope of q, rope of k and kv_store in one launch: the same q, k and
// caches as the three ops it replaces on the same device, bit for bit (those are checked
// against the CPU above and below), for each KV dtype, both pairings, a whole and a
// partial rotary dimension and grouped heads.
TEST_F(CudaBackendTest, FusedRopeAndKvStoreIsTheThreeOpsBitForBit) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      for (const bool partial : {false, true}) {
        const int32_t block_size = 16;
        const int32_t n_kv_heads = 1 + static_cast<int32_t>(rng_() % 4);
        const int32_t n_heads = n_kv_heads * (1 + static_cast<int32_t>(rng_() % 4));
        const int32_t head_dim = 2 * (4 + static_cast<int32_t>(rng_() % 61));
        const int64_t rotary = partial ? 2 * (1 + static_cast<int64_t>(rng_() % (head_dim / 2 - 1))) : head_dim;
        const RaggedStep step = ragged_step(rng_, block_size);
        const int32_t n = step.input.n_tokens();
        const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
        const size_t cache_bytes =
            static_cast<size_t>(step.n_blocks) * block_size * kv_dim * kernels::kv_dtype_bytes(dtype);
        const auto q = random_floats(static_cast<size_t>(n) * n_heads * head_dim, rng_, 2.0f);
        const auto k = random_floats(static_cast<size_t>(n * kv_dim), rng_, 2.0f);
        const auto v = random_floats(k.size(), rng_);
        std::vector<float> inv_freq(static_cast<size_t>(rotary / 2));
        for (size_t i = 0; i < inv_freq.size(); ++i) {
          inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(rotary));
        }
        const BackendBuffer fd = upload(*gpu_, inv_freq), vd = upload(*gpu_, v);
        const StepInput st = gpu_->upload(step.input);
        struct Out {
          std::vector<float> q, k;
          std::vector<std::byte> k_cache, v_cache;
        };
        auto run = [&](bool fused) {
          const BackendBuffer qd = upload(*gpu_, q), kd = upload(*gpu_, k);
          auto kc = gpu_->alloc(cache_bytes), vc = gpu_->alloc(cache_bytes);
          EXPECT_TRUE(kc.is_ok() && vc.is_ok());
          std::vector<std::byte> zeros(cache_bytes);
          gpu_->write(*kc, 0, zeros.data(), cache_bytes);
          gpu_->write(*vc, 0, zeros.data(), cache_bytes);
          const kernels::KvStoreParams p{.k = kd.f32(), .v = vd.f32(), .k_cache = kc->data(), .v_cache = vc->data(),
                                         .slots = st.slots, .n_tokens = n, .n_kv_heads = n_kv_heads,
                                         .head_dim = head_dim, .block_size = block_size, .kv_dtype = dtype};
          if (fused) {
            gpu_->rope_kv_store(qd.f32(), kd.f32(), n_heads, rotary, st.positions, fd.f32(), style, p);
          } else {
            gpu_->rope(qd.f32(), n, n_heads, head_dim, rotary, st.positions, fd.f32(), style);
            gpu_->rope(kd.f32(), n, n_kv_heads, head_dim, rotary, st.positions, fd.f32(), style);
            gpu_->kv_store(p);
          }
          Out o{download(*gpu_, qd, q.size()), download(*gpu_, kd, k.size()), std::vector<std::byte>(cache_bytes),
                std::vector<std::byte>(cache_bytes)};
          gpu_->read(*kc, 0, o.k_cache.data(), cache_bytes);
          gpu_->read(*vc, 0, o.v_cache.data(), cache_bytes);
          return o;
        };
        const Out fused = run(true), plain = run(false);
        const std::string what = fmt::format("{}, {}, head_dim {}, rotary {}, {} of {} heads",
                                             kernels::kv_dtype_name(dtype),
                                             style == RopeStyle::kHalf ? "halves" : "interleaved", head_dim, rotary,
                                             n_kv_heads, n_heads);
        ASSERT_EQ(std::memcmp(fused.q.data(), plain.q.data(), q.size() * 4), 0) << "q, " << what;
        ASSERT_EQ(std::memcmp(fused.k.data(), plain.k.data(), k.size() * 4), 0) << "k, " << what;
        ASSERT_EQ(fused.k_cache, plain.k_cache) << "key cache, " << what;
        ASSERT_EQ(fused.v_cache, plain.v_cache) << "value cache, " << what;
      }
    }
  }
  // A k other than the store's is refused, nothing launched.
  const kernels::KvStoreParams p{.k = nullptr, .n_tokens = 1, .n_kv_heads = 1, .head_dim = 8, .block_size = 16};
  float x = 0.0f;
  EXPECT_EQ(kernels::cuda::rope_kv_store(&x, &x, 1, 8, nullptr, nullptr, false, p, nullptr), cudaErrorInvalidValue);
}

TEST_F(CudaBackendTest, KvStoreAndPagedAttentionMatchTheCpuInEveryKvDtype) {
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (int trial = 0; trial < 3; ++trial) {
      const int32_t block_size = 16;
      const int32_t n_kv_heads = 1 + static_cast<int32_t>(rng_() % 4);
      const int32_t n_heads = n_kv_heads * (1 + static_cast<int32_t>(rng_() % 4));
      const int32_t head_dim = trial == 2 ? 256 : 2 * (1 + static_cast<int32_t>(rng_() % 64));
      const RaggedStep step = ragged_step(rng_, block_size);
      const ModelInput& in = step.input;
      const int32_t n = in.n_tokens();
      const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
      const size_t cache_bytes =
          static_cast<size_t>(step.n_blocks) * block_size * kv_dim * kernels::kv_dtype_bytes(dtype);
      // Fill every position's K/V on both sides: a store of random rows at every slot of
      // every sequence's table (the prefix the step's queries attend to).
      ModelInput fill;
      fill.clear(block_size);
      for (int32_t s = 0; s < in.n_seqs(); ++s) {
        const int32_t last = in.positions[static_cast<size_t>(in.query_start[static_cast<size_t>(s) + 1]) - 1];
        const std::span<const int32_t> table(in.pages.data() + in.page_start[static_cast<size_t>(s)],
                                             in.pages.data() + in.page_start[static_cast<size_t>(s) + 1]);
        std::vector<TokenId> ids(static_cast<size_t>(last) + 1, 1);
        ASSERT_TRUE(fill.add_sequence(ids, 0, table, false).is_ok());
      }
      const auto k = random_floats(static_cast<size_t>(fill.n_tokens() * kv_dim), rng_);
      const auto v = random_floats(k.size(), rng_);
      auto ck = cpu_->alloc(cache_bytes), cv = cpu_->alloc(cache_bytes);
      auto gk = gpu_->alloc(cache_bytes), gv = gpu_->alloc(cache_bytes);
      ASSERT_TRUE(ck.is_ok() && cv.is_ok() && gk.is_ok() && gv.is_ok());
      auto store = [&](const StepInput& st, const float* kr, const float* vr, void* kc, void* vc) {
        return kernels::KvStoreParams{.k = kr, .v = vr, .k_cache = kc, .v_cache = vc, .slots = st.slots,
                                      .n_tokens = st.n_tokens, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
                                      .block_size = st.block_size, .kv_dtype = dtype};
      };
      const StepInput cfill = cpu_->upload(fill);
      cpu_->kv_store(store(cfill, k.data(), v.data(), ck->data(), cv->data()));
      const BackendBuffer kd = upload(*gpu_, k), vd = upload(*gpu_, v);
      const StepInput gfill = gpu_->upload(fill);
      gpu_->kv_store(store(gfill, kd.f32(), vd.f32(), gk->data(), gv->data()));
      // The store is the reference's, bit for bit.
      std::vector<std::byte> host_k(cache_bytes), dev_k(cache_bytes);
      std::memcpy(host_k.data(), ck->data(), cache_bytes);
      gpu_->read(gk.value(), 0, dev_k.data(), cache_bytes);
      ASSERT_EQ(dev_k, host_k) << "kv_store " << kernels::kv_dtype_name(dtype);

      const auto q = random_floats(static_cast<size_t>(n) * n_heads * head_dim, rng_, 2.0f);
      std::vector<float> want(q.size());
      const StepInput cstep = cpu_->upload(in);
      const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      const int32_t window = trial == 1 ? 1 + static_cast<int32_t>(rng_() % 64) : 0;
      const float cap = trial == 0 ? 1.5f : 0.0f;  // Gemma 2's soft-capped scores
      auto attend = [&](const StepInput& st, const float* qr, float* o, const void* kc, const void* vc) {
        return kernels::AttentionStep{.q = qr, .out = o, .k_cache = kc, .v_cache = vc, .positions = st.positions,
                                      .query_start = st.query_start, .page_start = st.page_start, .pages = st.pages,
                                      .n_tokens = st.n_tokens, .n_seqs = st.n_seqs, .block_size = st.block_size,
                                      .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
                                      .scale = scale, .softcap = cap, .sliding_window = window,
                                      .kv_dtype = dtype};
      };
      cpu_->attention(attend(cstep, q.data(), want.data(), ck->data(), cv->data()));
      const BackendBuffer qd = upload(*gpu_, q);
      const BackendBuffer out = poisoned(*gpu_, q.size());
      const StepInput gstep = gpu_->upload(in);
      gpu_->attention(attend(gstep, qd.f32(), out.f32(), gk->data(), gv->data()));
      expect_near(download(*gpu_, out, q.size()), want, 1e-4f,
                  fmt::format("attention {} heads {}/{} head_dim {} window {} softcap {}",
                              kernels::kv_dtype_name(dtype), n_heads, n_kv_heads, head_dim, window, cap));
    }
  }
}

// Split attention (flash-decoding): decode rows over contexts of 1 to 2900 keys, with a
// sliding window or soft-capped scores in some, cut into 1 to 64 key ranges by hand and
// as the backend cuts them (from the device's SM count), against the CPU.
TEST_F(CudaBackendTest, SplitAttentionOverLongContextsMatchesTheCpu) {
  const int32_t block_size = 16, n_kv_heads = 2, n_heads = 4;
  const int32_t contexts[] = {1, 130, 1100, 2900};
  ModelInput in, fill;
  in.clear(block_size);
  fill.clear(block_size);
  int32_t n_blocks = 0;
  for (const int32_t ctx : contexts) {
    std::vector<int32_t> table(static_cast<size_t>((ctx + block_size - 1) / block_size));
    std::iota(table.begin(), table.end(), n_blocks);
    n_blocks += static_cast<int32_t>(table.size());
    ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{1}, ctx - 1, table, 1).is_ok());
    ASSERT_TRUE(fill.add_sequence(std::vector<TokenId>(static_cast<size_t>(ctx), 1), 0, table, 0).is_ok());
  }
  const int32_t n = in.n_tokens();
  ASSERT_EQ(in.max_keys(), 2900);
  const int32_t backend_splits = kernels::cuda::attention_splits(n, n_heads, in.max_keys(), 132);
  ASSERT_GT(backend_splits, 1) << "the emulated device's 132 SMs: the backend splits this step";
  const StepInput cfill = cpu_->upload(fill), cstep = cpu_->upload(in);
  // head_dim 80: not a multiple of a warp; 256: two dimensions a thread.
  for (const auto& [dtype, head_dim] : {std::pair{KvDType::kF32, 64}, std::pair{KvDType::kBF16, 80},
                                        std::pair{KvDType::kF16, 256}}) {
    const int64_t kv_dim = static_cast<int64_t>(n_kv_heads) * head_dim;
    const size_t cache_bytes = static_cast<size_t>(n_blocks) * block_size * kv_dim * kernels::kv_dtype_bytes(dtype);
    auto ck = cpu_->alloc(cache_bytes), cv = cpu_->alloc(cache_bytes);
    auto gk = gpu_->alloc(cache_bytes), gv = gpu_->alloc(cache_bytes);
    ASSERT_TRUE(ck.is_ok() && cv.is_ok() && gk.is_ok() && gv.is_ok());
    const auto k = random_floats(static_cast<size_t>(fill.n_tokens() * kv_dim), rng_);
    const auto v = random_floats(k.size(), rng_);
    auto store = [&](const StepInput& st, const float* kr, const float* vr, void* kc, void* vc) {
      return kernels::KvStoreParams{.k = kr, .v = vr, .k_cache = kc, .v_cache = vc, .slots = st.slots,
                                    .n_tokens = st.n_tokens, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
                                    .block_size = st.block_size, .kv_dtype = dtype};
    };
    cpu_->kv_store(store(cfill, k.data(), v.data(), ck->data(), cv->data()));
    const BackendBuffer kd = upload(*gpu_, k), vd = upload(*gpu_, v);
    // The backend stages one step's input at a time: the fill's, stored, then the step's.
    gpu_->kv_store(store(gpu_->upload(fill), kd.f32(), vd.f32(), gk->data(), gv->data()));
    const StepInput gstep = gpu_->upload(in);
    for (const auto& [window, cap] : {std::pair{0, 0.0f}, std::pair{1000, 0.0f}, std::pair{0, 2.0f}}) {
      const auto q = random_floats(static_cast<size_t>(n) * n_heads * head_dim, rng_, 2.0f);
      auto attend = [&](const StepInput& st, const float* qr, float* o, const void* kc, const void* vc) {
        return kernels::AttentionStep{.q = qr, .out = o, .k_cache = kc, .v_cache = vc, .positions = st.positions,
                                      .query_start = st.query_start, .page_start = st.page_start, .pages = st.pages,
                                      .n_tokens = st.n_tokens, .n_seqs = st.n_seqs, .block_size = st.block_size,
                                      .n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = head_dim,
                                      .scale = 1.0f / std::sqrt(static_cast<float>(head_dim)), .softcap = cap,
                                      .sliding_window = window, .kv_dtype = dtype,
                                      .max_keys = st.max_keys};
      };
      std::vector<float> want(q.size());
      cpu_->attention(attend(cstep, q.data(), want.data(), ck->data(), cv->data()));
      const BackendBuffer qd = upload(*gpu_, q);
      const std::string what = fmt::format("{} head_dim {} window {} softcap {}", kernels::kv_dtype_name(dtype),
                                           head_dim, window, cap);
      {
        const BackendBuffer out = poisoned(*gpu_, q.size());
        gpu_->attention(attend(gstep, qd.f32(), out.f32(), gk->data(), gv->data()));
        expect_near(download(*gpu_, out, q.size()), want, 1e-4f,
                    fmt::format("attention {}, split {} ways by the backend", what, backend_splits));
      }
      for (const int32_t splits : {1, 2, 3, 7, 64}) {
        const BackendBuffer out = poisoned(*gpu_, q.size());
        const size_t bytes = kernels::cuda::attention_scratch_bytes(n, n_heads, head_dim, splits);
        const BackendBuffer scratch = poisoned(*gpu_, bytes / sizeof(float));
        const kernels::cuda::AttentionSplit split{.splits = splits, .scratch = scratch.f32(),
                                                  .scratch_bytes = bytes};
        ASSERT_EQ(kernels::cuda::attention(attend(gstep, qd.f32(), out.f32(), gk->data(), gv->data()), split,
                                           static_cast<cudaStream_t>(gpu_->queue().handle)),
                  cudaSuccess);
        expect_near(download(*gpu_, out, q.size()), want, 1e-4f, fmt::format("attention {}, {} ranges", what, splits));
      }
    }
  }
  // Refused: a split count out of range, or too little scratch.
  const kernels::AttentionStep empty{.n_heads = n_heads, .n_kv_heads = n_kv_heads, .head_dim = 64};
  EXPECT_EQ(kernels::cuda::attention(empty, {.splits = 0}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::cuda::attention(empty, {.splits = 65}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kernels::cuda::attention(empty, {.splits = 2}, nullptr), cudaErrorInvalidValue);
}

// Sampling on the device against the host's sample_row: every parameter, penalties over
// prompt and output tokens, -inf logits, ties, top logprobs, fresh logits each run.
TEST_F(CudaBackendTest, SamplingMatchesTheHostSamplerRowForRow) {
  ASSERT_TRUE(gpu_->samples());
  for (const int64_t vocab : {int64_t{7}, int64_t{1000}, int64_t{32000}, int64_t{128256}}) {
    constexpr int kRows = 13;
    std::vector<float> logits = random_floats(static_cast<size_t>(kRows * vocab), rng_, 8.0f);
    for (int64_t i = 0; i < kRows * vocab; i += 97) logits[static_cast<size_t>(i)] = -INFINITY;  // masked tokens
    for (int64_t i = 5; i + 1 < kRows * vocab; i += 1013) logits[static_cast<size_t>(i + 1)] = logits[static_cast<size_t>(i)];
    std::uniform_int_distribution<TokenId> token(0, static_cast<TokenId>(vocab - 1));
    std::vector<std::vector<TokenId>> prompts(kRows), outputs(kRows);
    std::vector<SampleRow> rows(kRows);
    for (int r = 0; r < kRows; ++r) {
      for (int i = 0; i < 3 + r; ++i) prompts[r].push_back(token(rng_));
      for (int i = 0; i < 2 * r; ++i) outputs[r].push_back(token(rng_));
      SampleRow& row = rows[static_cast<size_t>(r)];
      row.sampling = {.temperature = r % 4 == 0 ? 0.0f : 0.5f + 0.1f * static_cast<float>(r % 5),
                      .top_p = r % 3 == 0 ? 0.8f : 1.0f,
                      .min_p = r % 5 == 2 ? 0.02f : 0.0f,
                      .repetition_penalty = r % 2 == 1 ? 1.2f : 1.0f,
                      .presence_penalty = r % 3 == 2 ? 0.7f : 0.0f,
                      .frequency_penalty = r % 4 == 3 ? 0.3f : 0.0f,
                      .top_k = r % 6 == 5 ? 40 : 0,
                      .seed = rng_()};
      row.draw = static_cast<uint64_t>(r * 3);
      row.top_logprobs = r % (kMaxTopLogprobs + 1);
      row.prompt = prompts[static_cast<size_t>(r)];
      row.output = outputs[static_cast<size_t>(r)];
    }
    BackendBuffer dev = upload(*gpu_, logits);
    std::vector<SampledRow> got(kRows);
    gpu_->sample(dev.f32(), vocab, rows, got);
    SampleScratch scratch;
    for (int r = 0; r < kRows; ++r) {
      Sampler sampler(rows[static_cast<size_t>(r)].sampling, static_cast<int32_t>(vocab));
      sampler.set_position(rows[static_cast<size_t>(r)].draw);
      const SampledRow want = sample_row(sampler, std::span(logits.data() + r * vocab, static_cast<size_t>(vocab)),
                                         rows[static_cast<size_t>(r)].top_logprobs, rows[static_cast<size_t>(r)].prompt,
                                         rows[static_cast<size_t>(r)].output, scratch);
      const SampledRow& g = got[static_cast<size_t>(r)];
      EXPECT_EQ(g.id, want.id) << "vocab " << vocab << " row " << r;
      EXPECT_NEAR(g.logprob, want.logprob, 1e-4f * (1.0f + std::fabs(want.logprob))) << "vocab " << vocab << " row " << r;
      ASSERT_EQ(g.n_top, want.n_top) << "vocab " << vocab << " row " << r;
      EXPECT_EQ(g.top_id, want.top_id) << "vocab " << vocab << " row " << r;  // the resident cache's check
      EXPECT_EQ(g.top_logit, want.top_logit) << "vocab " << vocab << " row " << r;
      for (int k = 0; k < want.n_top; ++k) {
        EXPECT_EQ(g.top_ids[static_cast<size_t>(k)], want.top_ids[static_cast<size_t>(k)]);
        EXPECT_NEAR(g.top_logprobs[static_cast<size_t>(k)], want.top_logprobs[static_cast<size_t>(k)], 1e-4f);
      }
    }
  }
}

// The device finds the host's cuts without sorting (radix selection): top-k from 1 to past
// the candidates, top-p from 0 to near 1, min-p, their combinations, and logits on a
// coarse grid so that many candidates tie at every cut and at the draw (ties go to the
// lower id), a row with one candidate, one whose keys overflow to -inf over a small
// temperature, and rows with nothing but -inf; every row drawn at many points of its
// stream, so the draw lands all over the distribution.
TEST_F(CudaBackendTest, SamplingCutsMatchTheHostOnTiesAndEdges) {
  ASSERT_TRUE(gpu_->samples());
  const int32_t top_ks[] = {0, 1, 2, 3, 17, 40, 999, 1000, 1001, 5000, 1 << 20};
  const float top_ps[] = {1.0f, 0.0f, 1e-6f, 0.1f, 0.5f, 0.9f, 0.999f, 0.99999f};
  const float min_ps[] = {0.0f, 0.0f, 0.0f, 0.001f, 0.05f, 0.5f, 1.0f};
  for (const int64_t vocab : {int64_t{1000}, int64_t{5000}}) {
    constexpr int kRows = 64;
    std::vector<float> logits(static_cast<size_t>(kRows * vocab));
    std::uniform_int_distribution<int> grid(-40, 40);
    for (float& l : logits) l = 0.25f * static_cast<float>(grid(rng_));  // 81 values: ties everywhere
    std::vector<SampleRow> rows(kRows);
    for (int r = 0; r < kRows; ++r) {
      float* row = logits.data() + r * vocab;
      if (r == 1) std::fill(row, row + vocab, -INFINITY);  // nothing to draw
      if (r == 2) {  // one candidate
        std::fill(row, row + vocab, -INFINITY);
        row[vocab / 2] = 3.0f;
      }
      if (r == 3) {  // a few candidates, all equal
        std::fill(row, row + vocab, -INFINITY);
        for (int64_t i = 7; i < vocab; i += vocab / 5) row[i] = -1.5f;
      }
      SampleRow& sr = rows[static_cast<size_t>(r)];
      sr.sampling = {.temperature = r == 4 ? 1e-38f : 0.3f + 0.05f * static_cast<float>(r % 30),
                     .top_p = top_ps[static_cast<size_t>(r) % std::size(top_ps)],
                     .min_p = min_ps[static_cast<size_t>(r / 3) % std::size(min_ps)],
                     .top_k = top_ks[static_cast<size_t>(r / 2) % std::size(top_ks)],
                     .seed = rng_()};
      sr.top_logprobs = r % 3;
    }
    BackendBuffer dev = upload(*gpu_, logits);
    SampleScratch scratch;
    std::vector<SampledRow> got(kRows);
    for (uint64_t draw = 0; draw < 4; ++draw) {
      for (int r = 0; r < kRows; ++r) rows[static_cast<size_t>(r)].draw = draw * 101 + static_cast<uint64_t>(r);
      gpu_->sample(dev.f32(), vocab, rows, got);
      for (int r = 0; r < kRows; ++r) {
        const SampleRow& sr = rows[static_cast<size_t>(r)];
        Sampler sampler(sr.sampling, static_cast<int32_t>(vocab));
        sampler.set_position(sr.draw);
        const SampledRow want = sample_row(sampler, std::span(logits.data() + r * vocab, static_cast<size_t>(vocab)),
                                           sr.top_logprobs, sr.prompt, sr.output, scratch);
        ASSERT_EQ(got[static_cast<size_t>(r)].id, want.id)
            << "vocab " << vocab << " row " << r << " draw " << sr.draw << " top_k " << sr.sampling.top_k << " top_p "
            << sr.sampling.top_p << " min_p " << sr.sampling.min_p << " temperature " << sr.sampling.temperature;
      }
    }
  }
}

TEST_F(CudaBackendTest, OutOfMemoryIsAnErrorThatSaysWhatIsFree) {
  const auto huge = gpu_->alloc(size_t{1} << 50);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(huge.status().message().find("MiB free"), std::string::npos) << huge.status().message();
  // The backend still works after the refusal.
  const BackendBuffer b = upload(*gpu_, std::vector<float>{1.0f, 2.0f});
  EXPECT_EQ(download(*gpu_, b, 2)[1], 2.0f);
}

// The model on the device: stories260K's greedy ground truth, and logits near the CPU's
// at every position of a prompt.
TEST_F(CudaBackendTest, Stories260KGroundTruthOnTheDevice) {
  const auto path = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  auto m = model_open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};  // BOS "Once upon a time"
  const std::vector<TokenId> first_ids = {432, 383, 286, 261, 376, 298, 315, 421,
                                          395, 317, 426, 338, 401, 396, 267, 337};
  for (KvDType dtype : {KvDType::kF32, KvDType::kF16}) {
    auto llama = Model::create(m->config, m->tensors, *gpu_, 64);
    ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
    auto cache = KvCache::create(*gpu_, {m->config.n_layers, m->config.kv_dim(), 16, 32, dtype});
    ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
    GenerateOptions options;
    options.spec.max_tokens = static_cast<int32_t>(first_ids.size());
    options.spec.sampling.temperature = 0.0f;
    auto result = generate(**llama, *cache, prompt, options);
    ASSERT_TRUE(result.is_ok()) << result.status().to_string();
    EXPECT_EQ(result->tokens, first_ids) << kernels::kv_dtype_name(dtype);
  }
}

// Speculative decoding on the device: drafted rows verified by the device sampler (each
// with its draw and the output before it) give plain decoding's tokens, greedy and seeded,
// by prompt lookup and by a draft model on the device (drafting whenever the proposer has
// a draft: the emulated device's step cost would stop it).
TEST_F(CudaBackendTest, SpeculationGivesPlainDecodingsTokensOnTheDevice) {
  const auto path = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  auto m = model_open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  auto llama = Model::create(m->config, m->tensors, *gpu_, 64);
  ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
  auto cache = KvCache::create(*gpu_, {m->config.n_layers, m->config.kv_dim(), 16, 32, KvDType::kF32});
  ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
  auto draft_cache = KvCache::create(*gpu_, {m->config.n_layers, m->config.kv_dim(), 16, 32, KvDType::kF32});
  ASSERT_TRUE(draft_cache.is_ok()) << draft_cache.status().to_string();
  // "Once upon a time" and its first greedy tokens, twice, then "Once upon a time" again:
  // lookup drafts what followed it before.
  const std::vector<TokenId> start = {403, 407, 261, 378};
  const std::vector<TokenId> story = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
  std::vector<TokenId> prompt = {1};
  for (int i = 0; i < 2; ++i) {
    prompt.insert(prompt.end(), start.begin(), start.end());
    prompt.insert(prompt.end(), story.begin(), story.end());
  }
  prompt.insert(prompt.end(), start.begin(), start.end());
  for (const SamplingParams& sampling : {SamplingParams{.temperature = 0.0f},
                                         SamplingParams{.temperature = 0.7f, .seed = 9}}) {
    GenerateOptions options;
    options.spec.max_tokens = 32;
    options.spec.sampling = sampling;
    auto plain = generate(**llama, *cache, prompt, options);
    options.speculative = {.method = SpecMethod::kNgram, .max_tokens = 4, .adaptive = false};
    auto spec = generate(**llama, *cache, prompt, options);
    ASSERT_TRUE(plain.is_ok() && spec.is_ok());
    EXPECT_EQ(spec->tokens, plain->tokens) << "temperature " << sampling.temperature;
    EXPECT_GT(spec->spec.draft_tokens, 0u);
    EXPECT_GT(spec->spec.accepted, 0u) << "temperature " << sampling.temperature;
    // A draft model on the device too (the target itself, over its own cache), seeded.
    if (sampling.temperature == 0.0f) continue;
    options.speculative.method = SpecMethod::kDraft;
    options.draft_model = llama->get();
    options.draft_cache = &*draft_cache;
    auto drafted = generate(**llama, *cache, prompt, options);
    ASSERT_TRUE(drafted.is_ok()) << drafted.status().to_string();
    EXPECT_EQ(drafted->tokens, plain->tokens) << "draft model, temperature " << sampling.temperature;
    EXPECT_GT(drafted->spec.accepted, 0u) << "temperature " << sampling.temperature;
  }
}

// Two LoRA adapters and the base in one batch on the device, as on the CPU: each
// stream's greedy tokens are the CPU's for the same adapter.
TEST_F(CudaBackendTest, MixedLoraAdaptersInOneBatchGiveTheCpusTokens) {
  const auto path = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  auto m = model_open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  testing::TempDir dir;
  std::vector<LoraAdapter> adapters;
  for (int32_t rank : {8, 32}) {
    const auto adir = dir.path() / fmt::format("a{}", rank);
    ASSERT_TRUE(lora_synth_write(*m, {.rank = rank, .alpha = 2.0 * rank, .seed = static_cast<uint64_t>(rank), .strength = 2.0}, adir).is_ok());
    adapters.push_back(std::move(lora_open(adir, m->config, m->tensors)).value());
  }
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  std::vector<std::vector<TokenId>> got[2];
  for (int b = 0; b < 2; ++b) {
    Backend& be = b == 0 ? *cpu_ : *gpu_;
    auto model = Model::create(m->config, m->tensors, be, 64, {.max_adapters = 2, .max_lora_rank = 32});
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    for (int32_t i = 0; i < 2; ++i) ASSERT_TRUE((*model)->set_adapter(i, adapters[static_cast<size_t>(i)]).is_ok());
    auto cache = KvCache::create(be, {m->config.n_layers, m->config.kv_dim(), 16, 32, KvDType::kF32});
    ASSERT_TRUE(cache.is_ok());
    ModelRunner runner(**model, *cache);
    Driver driver(runner, {.scheduler = {.max_batch_size = 6, .max_batched_tokens = 64}, .max_sequence_tokens = 128});
    for (uint64_t id = 0; id < 6; ++id) {
      ASSERT_TRUE(driver.add(id, {.tokens = prompt, .n_prompt = 5, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 24},
                                  .adapter = static_cast<int32_t>(id % 3) - 1}).is_ok());
    }
    got[b].resize(6);
    ASSERT_TRUE(driver.run_until_idle([&](const StepEvent& e) {
      got[b][e.id].push_back(e.token.id);
      return true;
    }).is_ok());
  }
  for (size_t id = 0; id < 6; ++id) EXPECT_EQ(got[1][id], got[0][id]) << "stream " << id;
  EXPECT_NE(got[0][1], got[0][0]) << "an adapter changes the text";
  EXPECT_NE(got[0][2], got[0][1]) << "the two adapters differ";
}

// An embedding's rows: the final hidden states a step asks for (hidden_rows, uploaded
// beside the logit rows) come back from the device as the CPU computes them.
TEST_F(CudaBackendTest, HiddenRowsOfAStepMatchTheCpu) {
  const auto path = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  auto m = model_open(path);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  std::vector<TokenId> prompt = {1};
  for (int i = 0; i < 19; ++i) prompt.push_back(static_cast<TokenId>(300 + 11 * i));
  ModelInput in;
  in.clear(16);
  ASSERT_TRUE(in.add_sequence(prompt, 0, std::vector<int32_t>{0, 1}, true).is_ok());
  in.hidden_rows = {3, 19, 0};
  const auto dim = static_cast<size_t>(m->config.dim);
  std::vector<float> got[2];
  for (int b = 0; b < 2; ++b) {
    Backend& be = b == 0 ? *gpu_ : *cpu_;
    auto model = Model::create(m->config, m->tensors, be, 64);
    ASSERT_TRUE(model.is_ok()) << model.status().to_string();
    auto cache = KvCache::create(be, {m->config.n_layers, m->config.kv_dim(), 16, 4});
    ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
    std::vector<float> logits(static_cast<size_t>(m->config.vocab_size));
    got[b].assign(3 * dim, kNaN);
    ASSERT_TRUE((*model)->forward(in, *cache, logits.data(), got[b].data()).is_ok());
    be.synchronize();
  }
  expect_near(got[0], got[1], 2e-3f, "hidden rows");
}

// Every family hearth runs (hearth synth's tiny models, F32 GGUF) gives the CPU's greedy
// ids on the device: LayerNorm, GELU, partial rotary, q/k norms, biases, parallel
// residuals and routed experts, through the whole forward pass.
TEST_F(CudaBackendTest, EveryFamilyGivesTheCpusGreedyIdsOnTheDevice) {
  testing::TempDir dir;
  for (std::string_view arch : kSynthArchs) {
    SynthOptions o;
    o.arch = std::string(arch);
    o.shape = synth_preset("tiny").value();
    if (arch == "gptneox" || arch == "gptj") o.shape.kv_heads = o.shape.heads;
    if (arch == "gemma2") o.shape.attn_softcap = 1.5f, o.shape.final_softcap = 3.0f;  // caps that bite
    o.gguf = dir.path() / (o.arch + ".gguf");
    o.gguf_type = DType::kF32;
    ASSERT_TRUE(synth_write(o).is_ok());
    auto m = model_open(o.gguf);
    ASSERT_TRUE(m.is_ok()) << m.status().to_string();
    std::vector<TokenId> prompt = {1};
    for (int i = 0; i < 20; ++i) prompt.push_back(static_cast<TokenId>(3 + (i * 37) % 500));
    std::vector<TokenId> ids[2];
    Backend* backends[] = {cpu_.get(), gpu_.get()};
    for (int b = 0; b < 2; ++b) {
      auto model = Model::create(m->config, m->tensors, *backends[b], 64);
      ASSERT_TRUE(model.is_ok()) << arch << ": " << model.status().to_string();
      auto cache = KvCache::create(*backends[b], {m->config.n_layers, m->config.kv_dim(), 16, 8, KvDType::kF32});
      ASSERT_TRUE(cache.is_ok());
      GenerateOptions options;
      options.spec.max_tokens = 12;
      options.spec.ignore_stop = true;
      options.spec.sampling.temperature = 0.0f;
      auto result = generate(**model, *cache, prompt, options);
      ASSERT_TRUE(result.is_ok()) << arch << ": " << result.status().to_string();
      ids[b] = result->tokens;
    }
    EXPECT_EQ(ids[1], ids[0]) << arch;
    EXPECT_EQ(ids[0].size(), 12u) << arch;
  }
}

}  // namespace
}  // namespace hearth
