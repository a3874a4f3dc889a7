// Micro-benchmarks of the CPU kernels: matrix-vector (decode) and matrix-matrix
// (prefill) products per weight format, and paged attention per KV cache dtype, with
// achieved bandwidth (GB/s) and GFLOP/s, one thread, on the instruction-set path this
// CPU gets (HEARTH_CPU_ISA narrows it). Run: build/bin/kernels_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_store.h"
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
    case DType::kBF16:
    case DType::kF16R16:
    case DType::kBF16R16: {
      const DType plain = hearth::dtype_plain(type);
      auto* p = reinterpret_cast<uint16_t*>(w.data());
      for (int64_t i = 0; i < rows * cols; ++i) {
        p[i] = plain == DType::kF16 ? hearth::f32_to_fp16(dist(rng)) : hearth::f32_to_bf16(dist(rng));
      }
      if (plain != type) {
        std::vector<std::byte> packed(bytes);
        hearth::kernels::cpu::repack_r16(plain, w.data(), rows, cols, packed.data());
        w = std::move(packed);
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
  const auto weights = random_weights(type, rows, cols);
  // On 2 MiB pages where the kernel allows, as the weights segment is (docs/operations.md):
  // from 4 KiB pages a pass from memory also pays a page walk every 4 KiB.
  // Mapped 2 MiB larger and used from its first 2 MiB boundary, which older kernels do not
  // choose for an anonymous mapping by themselves.
  constexpr size_t kHuge = 2u << 20;
  const size_t mapped = (weights.size() + kHuge - 1) / kHuge * kHuge + kHuge;
  void* base = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    state.SkipWithError("cannot map the weights");
    return;
  }
  std::unique_ptr<void, std::function<void(void*)>> unmap(base, [mapped](void* q) { ::munmap(q, mapped); });
  void* region = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~uintptr_t{kHuge - 1});
  ::madvise(region, mapped - kHuge, MADV_HUGEPAGE);
  std::memcpy(region, weights.data(), weights.size());
  const std::span<const std::byte> w(static_cast<const std::byte*>(region), weights.size());
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

// rows, cols, tokens. 2048 x 2048 stays in L3 on most hosts; 32768 x 2048 (64-256 MiB)
// never does, so its decode figure is the memory stream a decode step sees.
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({2048, 2048, 1})->Args({8192, 2048, 1})->Args({32768, 2048, 1})->Args({8192, 2048, 3});
  // 16 tokens: a batched decode step of 16 sequences, from L3 and (32768 rows) from memory.
  b->Args({2048, 2048, 32})->Args({8192, 2048, 16})->Args({2048, 8192, 16})->Args({32768, 2048, 16});
  b->Unit(benchmark::kMicrosecond);
}

// Attention over a paged KV cache, 1B shape (32 query heads, 8 KV heads, head_dim 64,
// blocks of 16), per KV cache dtype: args = query tokens, context, layers, KV heads per
// call. Decode is 1 query at a deep context, prefill a chunk of queries from position 0.
// Each iteration is one pass over every head, on the next of `layers` caches, each
// filled by kv_store: with 1 the cache stays in L2/L3 between calls, with 16 (the 1B
// model's layers) a call's keys and values come from memory, as in a decode step. The
// pass is one call for all 8 KV heads, or one per group of `KV heads per call` (the
// CPU backend hands its threads KV heads). KV_bytes is what one pass reads (each K and
// V row of the context once); GB/s is that per second.
void BM_Attention(benchmark::State& state, hearth::kernels::KvDType kv_dtype) {
  const int32_t n = static_cast<int32_t>(state.range(0)), context = static_cast<int32_t>(state.range(1));
  const auto layers = static_cast<int32_t>(state.range(2));
  const auto kv_per_call = static_cast<int32_t>(state.range(3));
  constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 64, kBlock = 16;
  const int32_t n_blocks = (context + kBlock - 1) / kBlock;
  const int64_t kv_dim = kKvHeads * kHeadDim;
  const int64_t n_slots = static_cast<int64_t>(n_blocks) * kBlock;
  const auto cache_bytes = static_cast<size_t>(n_slots * kv_dim * hearth::kernels::kv_dtype_bytes(kv_dtype));
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> k_rows(static_cast<size_t>(n_slots * kv_dim)), v_rows(k_rows.size());
  std::vector<float> q(static_cast<size_t>(n * kHeads * kHeadDim)), out(q.size());
  for (auto* vec : {&k_rows, &v_rows, &q}) {
    for (float& f : *vec) f = dist(rng);
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks)), positions(static_cast<size_t>(n));
  for (int32_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 5 + 1) % n_blocks;
  std::vector<int32_t> slots(static_cast<size_t>(n_slots));  // token t in its block of the table
  for (int64_t t = 0; t < n_slots; ++t) {
    slots[static_cast<size_t>(t)] = table[static_cast<size_t>(t / kBlock)] * kBlock + static_cast<int32_t>(t % kBlock);
  }
  for (int32_t i = 0; i < n; ++i) positions[static_cast<size_t>(i)] = context - n + i;
  std::vector<std::vector<std::byte>> k_cache(static_cast<size_t>(layers)), v_cache(k_cache.size());
  for (int32_t l = 0; l < layers; ++l) {
    k_cache[static_cast<size_t>(l)].resize(cache_bytes);
    v_cache[static_cast<size_t>(l)].resize(cache_bytes);
    hearth::kernels::KvStoreParams st{.k = k_rows.data(),
                                      .v = v_rows.data(),
                                      .k_cache = k_cache[static_cast<size_t>(l)].data(),
                                      .v_cache = v_cache[static_cast<size_t>(l)].data(),
                                      .slots = slots.data(),
                                      .n_tokens = n_slots,
                                      .n_kv_heads = kKvHeads,
                                      .head_dim = kHeadDim,
                                      .block_size = kBlock,
                                      .kv_dtype = kv_dtype};
    hearth::kernels::cpu::kv_store(st);
  }
  hearth::kernels::AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.kv_dtype = kv_dtype;
  p.block_table = table.data();
  p.positions = positions.data();
  p.block_size = kBlock;
  p.n_tokens = n;
  p.n_heads = kHeads;
  p.n_kv_heads = kKvHeads;
  p.head_dim = kHeadDim;
  p.scale = 0.125f;
  int32_t layer = 0;
  for (auto _ : state) {
    p.k_cache = k_cache[static_cast<size_t>(layer)].data();
    p.v_cache = v_cache[static_cast<size_t>(layer)].data();
    for (int32_t kv = 0; kv < kKvHeads; kv += kv_per_call) {
      hearth::kernels::cpu::attention(p, kv * (kHeads / kKvHeads), (kv + kv_per_call) * (kHeads / kKvHeads));
    }
    benchmark::DoNotOptimize(out.data());
    layer = layer + 1 == layers ? 0 : layer + 1;
  }
  double keys = 0;  // query-key pairs
  for (int32_t i = 0; i < n; ++i) keys += positions[static_cast<size_t>(i)] + 1;
  const auto iters = static_cast<double>(state.iterations());
  const double kv_bytes = 2.0 * context * static_cast<double>(kv_dim) * hearth::kernels::kv_dtype_bytes(kv_dtype);
  state.counters["KV_bytes"] = benchmark::Counter(kv_bytes, benchmark::Counter::kDefaults, benchmark::Counter::kIs1024);
  state.counters["GB/s"] =
      benchmark::Counter(kv_bytes * iters, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["GFLOP/s"] =
      benchmark::Counter(4.0 * kHeads * kHeadDim * keys * iters / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(std::string(hearth::kernels::cpu::cpu_isa_name(hearth::kernels::cpu::cpu_isa())) + ", 1 thread, " +
                 hearth::kernels::kv_dtype_name(kv_dtype) + " KV");
}

void attention_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 128, 1, 8})->Args({1, 1024, 1, 8})->Args({1, 4096, 1, 8})->Args({1, 4096, 16, 8});
  b->Args({1, 4096, 16, 1})->Args({1, 4096, 16, 2})->Args({1, 4096, 16, 4})->Args({128, 128, 1, 8});
  b->ArgNames({"tokens", "context", "layers", "kv_per_call"})->Unit(benchmark::kMicrosecond);
}
// What the instruction mix of a batched Q4_0/Q8_0 R16 pass (matmul_avx512.cpp,
// group_r16) allows on this core, with nothing loaded: for each 32-column block of 16
// rows, 8 tokens each run 8 vpdpbusd (512 multiply-adds) and scale the block's sum in
// floats (vcvtdq2ps, a vmulps for the weight and activation scales, vfmadd231ps), the
// tokens' chains in flight together. GFLOP/s counts 2 per multiply-add, as BM_Matmul
// does, so BM_Matmul/q4_0r16 at 16 tokens over this figure is the kernel's share of its
// ceiling. Skipped where the path is not AVX-512 with VNNI.
__attribute__((target("avx512f,avx512vnni"))) void vnni_scaled_blocks(int64_t blocks) {
  for (int64_t b = 0; b < blocks; ++b) {
    __asm__ volatile(
        "vpdpbusd %%zmm24, %%zmm16, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm16, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm17, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm18, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm19, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm20, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm21, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm22, %%zmm7\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm0\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm1\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm2\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm3\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm4\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm5\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm6\n\t"
        "vpdpbusd %%zmm24, %%zmm23, %%zmm7\n\t"
        "vcvtdq2ps %%zmm0, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm8\n\t"
        "vcvtdq2ps %%zmm1, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm9\n\t"
        "vcvtdq2ps %%zmm2, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm10\n\t"
        "vcvtdq2ps %%zmm3, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm11\n\t"
        "vcvtdq2ps %%zmm4, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm12\n\t"
        "vcvtdq2ps %%zmm5, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm13\n\t"
        "vcvtdq2ps %%zmm6, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm14\n\t"
        "vcvtdq2ps %%zmm7, %%zmm25\n\t"
        "vmulps %%zmm26, %%zmm27, %%zmm28\n\t"
        "vfmadd231ps %%zmm25, %%zmm28, %%zmm15\n\t"
        :
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
          "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
          "xmm25", "xmm26", "xmm27", "xmm28");
  }
}

void BM_VnniCeiling(benchmark::State& state) {
  if (hearth::kernels::cpu::cpu_isa() != hearth::kernels::cpu::CpuIsa::kAvx512) {
    state.SkipWithError("the R16 integer kernels' ceiling is measured on the AVX-512 VNNI path only");
    return;
  }
  constexpr int64_t kBlocks = 4096;  // 8 tokens of 16 rows x 32 columns each
  for (auto _ : state) vnni_scaled_blocks(kBlocks);
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * kBlocks * 8 * 16 * 32 * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel("avx512 vnni, 1 thread, no loads");
}
BENCHMARK(BM_VnniCeiling)->Unit(benchmark::kMicrosecond);

BENCHMARK_CAPTURE(BM_Attention, f32, hearth::kernels::KvDType::kF32)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, f16, hearth::kernels::KvDType::kF16)->Apply(attention_shapes);
BENCHMARK_CAPTURE(BM_Attention, bf16, hearth::kernels::KvDType::kBF16)->Apply(attention_shapes);

BENCHMARK_CAPTURE(BM_Matmul, f32, DType::kF32)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, f16, DType::kF16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16, DType::kBF16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q8_0, DType::kQ8_0)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_0, DType::kQ4_0)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q8_0r16, DType::kQ8_0R16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, q4_0r16, DType::kQ4_0R16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, f16r16, DType::kF16R16)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Matmul, bf16r16, DType::kBF16R16)->Apply(shapes);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  // HEARTH_CPU_PREFETCH=BYTES measures another weight prefetch distance (as in the engine).
  if (const int env = hearth::kernels::cpu::weight_prefetch_from_env(); env >= 0) {
    hearth::kernels::cpu::set_weight_prefetch_bytes(env);
  }
  benchmark::AddCustomContext("cpu", hearth::kernels::cpu::cpu_host_summary());
  benchmark::AddCustomContext("weight prefetch bytes", std::to_string(hearth::kernels::cpu::weight_prefetch_bytes()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
