// Micro-benchmarks of the CPU kernels: matrix-vector (decode) and matrix-matrix
// (prefill) products per weight format, with achieved weight bandwidth (GB/s) and
// GFLOP/s, one thread, on the instruction-set path this CPU gets (HEARTH_CPU_ISA narrows
// it). Run: build/bin/kernels_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/repack.h"

namespace {

using hearth::DType;

std::vector<std::byte> random_weights(DType type, int64_t rows, int64_t cols) {
  const uint64_t bytes = *hearth::dtype_bytes(type, rows * cols);
  std::vector<std::byte> w(bytes);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  switch (type) {
    case DType::kF32: {
      auto* p = reinterpret_cast<float*>(w.data());
      for (int64_t i = 0; i < rows * cols; ++i) p[i] = dist(rng);
      break;
    }
    case DType::kF16:
    case DType::kBF16: {
      auto* p = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < rows * cols; ++i) {
        p[i] = type == DType::kF16 ? hearth::f32_to_fp16(dist(rng)) : hearth::f32_to_bf16(dist(rng));
      }
      break;
    }
    default: {  // quantized blocks: a small scale and random quants (repacked for R16)
      for (uint64_t i = 0; i < bytes; ++i) w[i] = static_cast<std::byte>(rng());
      const DType plain = hearth::dtype_plain(type);
      for (uint64_t off = 0; off < bytes; off += static_cast<uint64_t>(hearth::dtype_block_bytes(plain))) {
        const uint16_t d = hearth::f32_to_fp16(0.01f);
        std::memcpy(w.data() + off, &d, 2);
      }
      if (plain != type) {
        std::vector<std::byte> packed(bytes);
        hearth::kernels::cpu::repack_r16(plain, w.data(), rows, cols, packed.data());
        w = std::move(packed);
      }
    }
  }
  return w;
}

void BM_Matmul(benchmark::State& state, DType type) {
  const int64_t rows = state.range(0), cols = state.range(1), n = state.range(2);
  const auto w = random_weights(type, rows, cols);
  std::vector<float> x(static_cast<size_t>(n * cols), 0.25f), y(static_cast<size_t>(n * rows));
  std::vector<std::byte> scratch(hearth::kernels::cpu::quantized_activation_bytes(n, cols));
  hearth::kernels::cpu::MatmulParams p;
  p.type = type;
  p.w = w.data();
  p.rows = rows;
  p.cols = cols;
  p.x = x.data();
  p.n_tokens = n;
  p.y = y.data();
  hearth::kernels::cpu::QuantizedActivations xq;
  for (auto _ : state) {
    if (hearth::kernels::cpu::matmul_uses_quantized_activations(type)) {
      xq = hearth::kernels::cpu::quantize_activations(x.data(), n, cols, scratch.data());
      p.xq = &xq;
    }
    hearth::kernels::cpu::matmul_rows(p, 0, rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(w.size()) * static_cast<double>(state.iterations()),
                                              benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * static_cast<double>(rows * cols * n) * static_cast<double>(state.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
  state.SetLabel(std::string(hearth::kernels::cpu::cpu_isa_name(hearth::kernels::cpu::cpu_isa())) + ", 1 thread");
}

void shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 2048, 1})->Args({8192, 2048, 1})->Args({8192, 2048, 3})->Args({2048, 2048, 32})->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_Matmul, f32, DType::kF32)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, f16, DType::kF16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16, DType::kBF16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q8_0, DType::kQ8_0)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_0, DType::kQ4_0)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q8_0r16, DType::kQ8_0R16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_0r16, DType::kQ4_0R16)->Apply(shapes);

}  // namespace

BENCHMARK_MAIN();
