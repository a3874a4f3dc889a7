// Every CPU kernel against the scalar reference, on random inputs and ragged shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/half.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_store.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/repack.h"
#include "kernels/cpu/ops.h"
#include "kernels/reference/reference.h"
#include "loader/quantize.h"
#include "tests/cpu_paths.h"

namespace hearth::kernels {
namespace {

std::vector<float> random_floats(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Realistic blocks through the loader's quantizers (ggml's reference rules); R16 layouts
// are the plain blocks repacked, as the loader does.
std::vector<std::byte> encode(DType type, const std::vector<float>& x, int64_t rows = 1) {
  if (dtype_row_group(type) == 1) return quantize(type, x);
  const auto plain = quantize(dtype_plain(type), x);
  std::vector<std::byte> out(plain.size());
  cpu::repack_r16(dtype_plain(type), plain.data(), rows, static_cast<int64_t>(x.size()) / rows, out.data());
  return out;
}

// Runs the CPU matmul for `p` on the currently forced path, quantizing x when the
// weights need it.
void cpu_matmul(cpu::MatmulParams p, int64_t row_begin, int64_t row_end) {
  std::vector<std::byte> scratch(cpu::quantized_activation_bytes(p.n_tokens, p.cols));
  cpu::QuantizedActivations xq;
  if (cpu::matmul_uses_quantized_activations(p.type)) {
    xq = cpu::quantize_activations(p.x, p.n_tokens, p.cols, scratch.data());
    p.xq = &xq;
  }
  cpu::matmul_rows(p, row_begin, row_end);
}

using testing::available_cpu_paths;
using IsaGuard = testing::CpuIsaGuard;

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, EveryPathMatchesTheReferenceOnRaggedShapes) {
  const DType type = GetParam();
  IsaGuard guard;
  const int block = dtype_block_elems(type) == 1 ? 32 : dtype_block_elems(type);
  // Columns: whole blocks, odd block counts (a lone block after the pairs), and for plain
  // types widths that are not multiples of any vector, and rows of 3 and 5 column blocks
  // and a tail (decode runs whole blocks two at a time, then the rest one by one).
  std::vector<int64_t> col_counts = {block, 3 * block, 9 * block, 64 * block, 65 * block};
  if (dtype_block_elems(type) == 1 && dtype_row_group(type) == 1) {
    col_counts.insert(col_counts.end(), {1, 7, 19, 67, 133, 3 * 1024 + 7, 5 * 1024 + 7});
  }
  std::map<std::pair<int64_t, int64_t>, std::vector<float>> scalar_results;
  for (cpu::CpuIsa isa : available_cpu_paths()) {
    ASSERT_TRUE(cpu::cpu_isa_force(isa));
    std::mt19937 rng(1234 + static_cast<int>(type));
    for (int64_t cols : col_counts) {
      for (int64_t n : {1, 2, 3, 4, 5, 9, 17}) {  // 17: R16 batches go 8 tokens a pass
        const int64_t rows = dtype_row_group(type) > 1 ? 48 : 13;
        const auto w = encode(type, random_floats(static_cast<size_t>(rows * cols), rng), rows);
        const auto x = random_floats(static_cast<size_t>(n * cols), rng);
        std::vector<float> want(static_cast<size_t>(n * rows)), got(want.size());
        ref::matmul(type, w.data(), rows, cols, x.data(), n, want.data());
        cpu::MatmulParams p;
        p.type = type;
        p.w = w.data();
        p.rows = rows;
        p.cols = cols;
        p.x = x.data();
        p.n_tokens = n;
        p.y = got.data();
        cpu_matmul(p, 0, rows);
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::sqrt(static_cast<float>(cols))))
              << dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ": " << rows << "x" << cols << " n=" << n
              << " at " << i;
        }
        // On the quantized R16 layouts every path adds the blocks of a row in the same
        // order, with one fused multiply-add each: bit-identical to the scalar path.
        if (dtype_row_group(type) > 1 && cpu::matmul_uses_quantized_activations(type)) {
          auto [it, first] = scalar_results.try_emplace({cols, n}, got);
          if (!first) {
            EXPECT_EQ(got, it->second) << dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ": " << rows << "x"
                                       << cols << " n=" << n;
          }
        }
        // The 16-bit R16 layouts compute each output exactly as the plain layout does on
        // the same path: bit for bit the plain matrix's result.
        if (dtype_row_group(type) > 1 && !cpu::matmul_uses_quantized_activations(type)) {
          std::vector<std::byte> plain(w.size());
          for (int64_t r = 0; r < rows; ++r) {
            cpu::unpack_row_r16(type, w.data(), cols, r, plain.data() + r * cols * 2);
          }
          std::vector<float> from_plain(want.size());
          p.type = dtype_plain(type);
          p.w = plain.data();
          p.y = from_plain.data();
          cpu_matmul(p, 0, rows);
          p.type = type;
          p.w = w.data();
          EXPECT_EQ(from_plain, got) << dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ": " << rows << "x"
                                     << cols << " n=" << n;
        }
        // Split row ranges give the same rows (how the thread pool calls it), also when a
        // range cuts a group of interleaved rows.
        std::vector<float> split(want.size());
        p.y = split.data();
        const int64_t cut = std::min<int64_t>(21, rows);
        cpu_matmul(p, 0, 5);
        cpu_matmul(p, 5, cut);
        cpu_matmul(p, cut, rows);
        EXPECT_EQ(split, got);
        // The last token alone gives exactly what it gives in the batch (the engine's
        // outputs must not depend on which requests share a step).
        std::vector<float> alone(static_cast<size_t>(rows));
        p.x = x.data() + (n - 1) * cols;
        p.n_tokens = 1;
        p.y = alone.data();
        cpu_matmul(p, 0, rows);
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + (n - 1) * rows))
            << dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ": " << rows << "x" << cols << " n=" << n;
      }
    }
  }
}

TEST_P(MatmulTest, DequantizeMatchesReference) {
  const DType type = GetParam();
  if (dtype_row_group(type) > 1) GTEST_SKIP() << "interleaved rows are unpacked, not dequantized, one by one";
  std::mt19937 rng(99);
  const int64_t n = 5 * 32;
  const auto w = encode(type, random_floats(n, rng));
  std::vector<float> a(n), b(n);
  ref::dequantize_row(type, w.data(), a.data(), n);
  cpu::dequantize_row(type, w.data(), b.data(), n);
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0,
                                           DType::kQ8_0R16, DType::kQ4_0R16, DType::kF16R16, DType::kBF16R16),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// A ragged step as the per-sequence params the CPU kernels take: each sequence's rows
// of q and out, its pages and positions, everything else the step's.
TEST(KernelsTest, SequenceAttentionCutsAStepIntoItsSequences) {
  const int32_t query_start[] = {0, 3, 4, 9};
  const int32_t page_start[] = {0, 2, 3, 6};
  const int32_t pages[] = {7, 1, 4, 2, 5, 8};
  const int32_t positions[] = {0, 1, 2, 40, 16, 17, 18, 19, 20};
  std::vector<float> q(9 * 4 * 8), out(q.size());
  int cache = 0;
  const AttentionStep st{.q = q.data(), .out = out.data(), .k_cache = &cache, .v_cache = &cache + 1,
                         .positions = positions, .query_start = query_start, .page_start = page_start,
                         .pages = pages, .n_tokens = 9, .n_seqs = 3, .block_size = 16, .n_heads = 4,
                         .n_kv_heads = 2, .head_dim = 8, .scale = 0.5f, .sliding_window = 3,
                         .kv_dtype = KvDType::kBF16};
  for (int32_t s = 0; s < st.n_seqs; ++s) {
    const AttentionParams p = sequence_attention(st, s);
    EXPECT_EQ(p.q, q.data() + query_start[s] * 32) << s;
    EXPECT_EQ(p.out, out.data() + query_start[s] * 32) << s;
    EXPECT_EQ(p.n_tokens, query_start[s + 1] - query_start[s]) << s;
    EXPECT_EQ(p.block_table, pages + page_start[s]) << s;
    EXPECT_EQ(p.positions, positions + query_start[s]) << s;
    EXPECT_EQ(p.k_cache, st.k_cache);
    EXPECT_EQ(p.v_cache, st.v_cache);
    EXPECT_EQ(p.block_size, 16);
    EXPECT_EQ(p.n_heads, 4);
    EXPECT_EQ(p.n_kv_heads, 2);
    EXPECT_EQ(p.head_dim, 8);
    EXPECT_EQ(p.scale, 0.5f);
    EXPECT_EQ(p.sliding_window, 3);
    EXPECT_EQ(p.kv_dtype, KvDType::kBF16);
  }
}

TEST(KernelsTest, RepackRoundTripsEveryRow) {
  std::mt19937 rng(3);
  const int64_t rows = 32, cols = 96;
  for (DType plain : {DType::kQ8_0, DType::kQ4_0, DType::kF16, DType::kBF16}) {
    const auto src = quantize(plain, random_floats(static_cast<size_t>(rows * cols), rng));
    std::vector<std::byte> packed(src.size()), row(*dtype_bytes(plain, cols));
    ASSERT_TRUE(cpu::repack_supported(plain, rows, cols));
    EXPECT_FALSE(cpu::repack_supported(plain, 17, cols));
    cpu::repack_r16(plain, src.data(), rows, cols, packed.data());
    EXPECT_NE(packed, src);
    EXPECT_FALSE(cpu::repack_supported(plain, rows, 48));
    const DType packed_type = cpu::r16_of(plain);
    EXPECT_EQ(dtype_plain(packed_type), plain);
    EXPECT_EQ(dtype_row_group(packed_type), 16);
    for (int64_t r = 0; r < rows; ++r) {
      cpu::unpack_row_r16(packed_type, packed.data(), cols, r, row.data());
      EXPECT_EQ(std::memcmp(row.data(), src.data() + r * row.size(), row.size()), 0) << r;
    }
  }
}

TEST(KernelsTest, ActivationQuantizationIsExactWhereItShouldBe) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i - 32) * 0.5f;
  std::vector<std::byte> scratch(cpu::quantized_activation_bytes(1, 64));
  const auto q = cpu::quantize_activations(x.data(), 1, 64, scratch.data());
  EXPECT_FLOAT_EQ(q.d[0], 16.0f / 127.0f);
  EXPECT_EQ(q.qs[0], -127);  // -16 is the block's largest magnitude
  int sum = 0;
  for (int j = 0; j < 32; ++j) sum += q.qs[j];
  EXPECT_FLOAT_EQ(q.s[0], q.d[0] * static_cast<float>(sum));
  std::vector<float> zeros(32, 0.0f);
  const auto z = cpu::quantize_activations(zeros.data(), 1, 32, scratch.data());
  EXPECT_EQ(z.d[0], 0.0f);
  EXPECT_EQ(z.qs[5], 0);
}

TEST(KernelsTest, ActivationQuantizationIsBitIdenticalOnEveryPath) {
  IsaGuard guard;
  std::mt19937 rng(5);
  const int64_t n = 3, cols = 256;
  auto x = random_floats(static_cast<size_t>(n * cols), rng, 3.0f);
  // Ties: a block whose largest magnitude is 127 puts every integer + 0.5 on a tie.
  for (int j = 0; j < 32; ++j) x[static_cast<size_t>(j)] = static_cast<float>(j) - 15.5f;
  x[31] = 127.0f;
  std::vector<std::byte> scratch(cpu::quantized_activation_bytes(n, cols));
  std::vector<int8_t> want_q;
  std::vector<float> want_d, want_s;
  for (cpu::CpuIsa isa : available_cpu_paths()) {
    ASSERT_TRUE(cpu::cpu_isa_force(isa));
    const auto q = cpu::quantize_activations(x.data(), n, cols, scratch.data());
    std::vector<int8_t> qs(q.qs, q.qs + n * cols);
    std::vector<float> d(q.d, q.d + n * cols / 32), sums(q.s, q.s + n * cols / 32);
    if (want_q.empty()) {
      want_q = qs, want_d = d, want_s = sums;
      EXPECT_EQ(qs[0], -16);  // -15.5 rounds to even
      EXPECT_EQ(qs[1], -14);  // -14.5 too
      continue;
    }
    EXPECT_EQ(qs, want_q) << cpu::cpu_isa_name(isa);
    EXPECT_EQ(d, want_d) << cpu::cpu_isa_name(isa);
    EXPECT_EQ(sums, want_s) << cpu::cpu_isa_name(isa);
  }
}

// Every test that loops over available_cpu_paths() covers the paths printed here; a
// path this CPU lacks is reported as a skip, not passed over in silence.
TEST(CpuPaths, ThisRunCoversEveryPath) {
  const std::string covered = testing::cpu_paths_covered();
  std::printf("[isa] path tests in this run cover: %s (this CPU: %s)\n", covered.c_str(),
              std::string(cpu::cpu_isa_name(cpu::cpu_isa_detected())).c_str());
  RecordProperty("cpu_paths", covered);
  if (cpu::cpu_isa_detected() != cpu::CpuIsa::kAvx512) {
    GTEST_SKIP() << "the AVX-512 (VNNI) paths are not covered: this CPU lacks them (covered: " << covered
                 << "); run the suite on one that has them too";
  }
}

TEST(KernelsTest, IsaSelectionCanBeNarrowedButNotWidened) {
  IsaGuard guard;
  EXPECT_TRUE(cpu::cpu_isa_force(cpu::CpuIsa::kScalar));
  EXPECT_EQ(cpu::cpu_isa(), cpu::CpuIsa::kScalar);
  if (cpu::cpu_isa_detected() != cpu::CpuIsa::kAvx512) {
    EXPECT_FALSE(cpu::cpu_isa_force(cpu::CpuIsa::kAvx512));
  }
  std::printf("this CPU: %s\n", std::string(cpu::cpu_isa_name(cpu::cpu_isa_detected())).c_str());
}

// HEARTH_CPU_ISA is read once per process: each value in a fresh one (a death test in
// the "threadsafe" style re-executes the binary).
TEST(KernelsTest, HearthCpuIsaNarrowsThePathButNeverWidensIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const int detected = static_cast<int>(cpu::cpu_isa_detected());
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_CPU_ISA", "scalar", 1);
        std::exit(cpu::cpu_isa() == cpu::CpuIsa::kScalar ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_CPU_ISA", "avx512", 1);
        std::exit(static_cast<int>(cpu::cpu_isa()) == std::min(detected, static_cast<int>(cpu::CpuIsa::kAvx512)) ? 0
                                                                                                                 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        ::setenv("HEARTH_CPU_ISA", "avx2", 1);
        std::exit(static_cast<int>(cpu::cpu_isa()) == std::min(detected, static_cast<int>(cpu::CpuIsa::kAvx2)) ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(KernelsTest, QuantizedReferenceDequantizesGgmlBlocksExactly) {
  BlockQ4_0 b{};
  b.d = f32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float out[32];
  ref::dequantize_row(DType::kQ4_0, &b, out, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 8));            // low nibble: element j
    EXPECT_EQ(out[j + 16], 0.5f * static_cast<float>(15 - j - 8));  // high nibble: element j + 16
  }
}

TEST(KernelsTest, RmsNormMatchesReference) {
  std::mt19937 rng(5);
  for (int64_t dim : {1, 7, 64, 133}) {
    const auto x = random_floats(static_cast<size_t>(3 * dim), rng, 3.0f);
    const auto w = random_floats(static_cast<size_t>(dim), rng);
    std::vector<float> a(x.size()), b(x.size());
    ref::rms_norm(x.data(), w.data(), 3, dim, 1e-5f, a.data());
    cpu::rms_norm(x.data(), w.data(), 3, dim, 1e-5f, b.data());
    for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f * (1 + std::fabs(a[i])));
  }
}

TEST(KernelsTest, FusedAddRmsNormEqualsAddThenRmsNormAndTheReference) {
  std::mt19937 rng(9);
  for (int64_t dim : {8, 13, 64, 2051}) {
    const int64_t n = 3;
    const auto x0 = random_floats(static_cast<size_t>(n * dim), rng);
    const auto delta = random_floats(x0.size(), rng);
    const auto w = random_floats(static_cast<size_t>(dim), rng);
    std::vector<float> xa = x0, xb = x0, out_a(x0.size()), out_b = delta;
    cpu::add(xa.data(), delta.data(), n * dim);
    cpu::rms_norm(xa.data(), w.data(), n, dim, 1e-5f, out_a.data());
    cpu::add_rms_norm(xb.data(), out_b.data(), w.data(), n, dim, 1e-5f, out_b.data());  // out aliases delta
    EXPECT_EQ(xb, xa) << dim;
    EXPECT_EQ(out_b, out_a) << dim;
    // Against the scalar reference written independently (the two above share code).
    std::vector<float> sum(x0.size()), want(x0.size());
    for (size_t i = 0; i < x0.size(); ++i) sum[i] = x0[i] + delta[i];
    ref::rms_norm(sum.data(), w.data(), n, dim, 1e-5f, want.data());
    for (size_t i = 0; i < sum.size(); ++i) {
      ASSERT_EQ(xb[i], sum[i]) << "the residual, dim " << dim << " at " << i;
      ASSERT_NEAR(out_b[i], want[i], 1e-5f * (1 + std::fabs(want[i]))) << "dim " << dim << " at " << i;
    }
  }
}

TEST(KernelsTest, RopeMatchesReferenceInBothStylesWholeAndPartial) {
  std::mt19937 rng(6);
  const int64_t n = 3, heads = 5, hd = 12;
  const std::vector<int32_t> pos = {0, 17, 4095};
  for (int64_t rotary : {hd, int64_t{4}}) {
    std::vector<float> inv(rotary / 2);
    for (int64_t i = 0; i < rotary / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / rotary);
    for (RopeStyle style : {RopeStyle::kInterleaved, RopeStyle::kHalf}) {
      const auto x = random_floats(static_cast<size_t>(n * heads * hd), rng);
      auto a = x, b = x;
      ref::rope(a.data(), n, heads, hd, rotary, pos.data(), inv.data(), style);
      cpu::rope(b.data(), n, heads, hd, rotary, pos.data(), inv.data(), style);
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-6f);
      for (int64_t row = 0; row < n * heads; ++row) {  // the dimensions past rotary_dim are kept
        for (int64_t d = rotary; d < hd; ++d) ASSERT_EQ(a[row * hd + d], x[row * hd + d]);
      }
    }
  }
}

TEST(KernelsTest, LayerNormMatchesReferenceWithAndWithoutBias) {
  std::mt19937 rng(16);
  for (int64_t dim : {1, 7, 64, 333}) {
    const int64_t n = 3;
    auto x = random_floats(static_cast<size_t>(n * dim), rng);
    for (float& v : x) v = 3.0f + 2.0f * v;  // a mean far from zero
    const auto w = random_floats(static_cast<size_t>(dim), rng), b = random_floats(static_cast<size_t>(dim), rng);
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> want(x.size()), got = x;
      ref::layer_norm(x.data(), w.data(), bias, n, dim, 1e-5f, want.data());
      cpu::layer_norm(got.data(), w.data(), bias, n, dim, 1e-5f, got.data());  // in place
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f) << "dim " << dim << " at " << i;
    }
  }
}

TEST(KernelsTest, MoeRouteAndCombineMatchReference) {
  std::mt19937 rng(18);
  for (const auto& [experts, k] : {std::pair{8, 2}, std::pair{64, 8}, std::pair{3, 3}}) {
    const int64_t n = 7, dim = 33;
    auto logits = random_floats(static_cast<size_t>(n * experts), rng);
    for (float& v : logits) v *= 4.0f;
    logits[1] = logits[0];  // a tie: the lower id first
    for (bool normalize : {true, false}) {
      std::vector<int32_t> want_ids(static_cast<size_t>(n * k)), got_ids(want_ids.size());
      std::vector<float> want_w(want_ids.size()), got_w(want_ids.size());
      const kernels::MoeRouting r{experts, k, normalize};
      ref::moe_route(logits.data(), n, r, want_ids.data(), want_w.data());
      cpu::moe_route(logits.data(), n, r, got_ids.data(), got_w.data());
      ASSERT_EQ(got_ids, want_ids) << experts << " experts, top " << k;
      for (size_t i = 0; i < want_w.size(); ++i) ASSERT_NEAR(got_w[i], want_w[i], 1e-6f);
      for (int64_t t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int32_t j = 0; j < k; ++j) sum += got_w[static_cast<size_t>(t * k + j)];
        if (normalize) EXPECT_NEAR(sum, 1.0f, 1e-6f);
        for (int32_t j = 1; j < k; ++j) {  // descending
          EXPECT_GE(logits[static_cast<size_t>(t * experts + got_ids[static_cast<size_t>(t * k + j - 1)])],
                    logits[static_cast<size_t>(t * experts + got_ids[static_cast<size_t>(t * k + j)])]);
        }
      }
    }
    // Combination: rows gathered in any order, each (token, expert) pointing at its row.
    const auto rows = random_floats(static_cast<size_t>(n * k * dim), rng);
    std::vector<int32_t> pos(static_cast<size_t>(n * k));
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = static_cast<int32_t>((i * 5 + 3) % pos.size());
    const auto weights = random_floats(pos.size(), rng);
    std::vector<float> want(static_cast<size_t>(n * dim)), got(want.size());
    ref::moe_combine(rows.data(), pos.data(), weights.data(), n, k, dim, want.data());
    cpu::moe_combine(rows.data(), pos.data(), weights.data(), n, k, dim, got.data());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f);
  }
  std::vector<int32_t> ids(2);
  std::vector<float> w(2);
  const float tie[4] = {1.0f, 3.0f, 3.0f, 0.0f};
  ref::moe_route(tie, 1, {4, 2, true}, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
}

// DeepSeek V3 / GLM-4.5 routing: sigmoid scores, the k chosen by score plus a per-expert
// bias, their weights the scores without it, renormalised and scaled.
TEST(KernelsTest, SigmoidRoutingWithABiasMatchesReference) {
  std::mt19937 rng(31);
  const int32_t experts = 16, k = 4;
  const int64_t n = 9;
  auto logits = random_floats(static_cast<size_t>(n * experts), rng, 3.0f);
  auto bias = random_floats(static_cast<size_t>(experts), rng, 0.5f);
  for (bool normalize : {true, false}) {
    for (const float* b : {static_cast<const float*>(bias.data()), static_cast<const float*>(nullptr)}) {
      const kernels::MoeRouting r{experts, k, normalize, true, b, 2.5f};
      std::vector<int32_t> want_ids(static_cast<size_t>(n * k)), got_ids(want_ids.size());
      std::vector<float> want_w(want_ids.size()), got_w(want_ids.size());
      ref::moe_route(logits.data(), n, r, want_ids.data(), want_w.data());
      cpu::moe_route(logits.data(), n, r, got_ids.data(), got_w.data());
      ASSERT_EQ(got_ids, want_ids);
      for (size_t i = 0; i < want_w.size(); ++i) ASSERT_NEAR(got_w[i], want_w[i], 1e-6f);
      for (int64_t t = 0; t < n; ++t) {
        float sum = 0.0f;
        for (int32_t j = 0; j < k; ++j) {
          const int32_t e = got_ids[static_cast<size_t>(t * k + j)];
          const float sig = 1.0f / (1.0f + std::exp(-logits[static_cast<size_t>(t * experts + e)]));
          if (!normalize) EXPECT_NEAR(got_w[static_cast<size_t>(t * k + j)], 2.5f * sig, 1e-5f);
          sum += got_w[static_cast<size_t>(t * k + j)];
        }
        if (normalize) EXPECT_NEAR(sum, 2.5f, 1e-5f);
      }
    }
  }
  // The bias moves the choice, not the weight: expert 0 has the larger logit, expert 1
  // the larger score plus bias.
  const float l[2] = {1.0f, 0.5f};
  const float b2[2] = {0.0f, 0.5f};
  int32_t id = -1;
  float w = 0.0f;
  ref::moe_route(l, 1, {2, 1, false, true, b2, 1.0f}, &id, &w);
  EXPECT_EQ(id, 1);
  EXPECT_NEAR(w, 1.0f / (1.0f + std::exp(-0.5f)), 1e-6f);
}

TEST(KernelsTest, ScaleMatchesReference) {
  std::mt19937 rng(19);
  const auto x = random_floats(333, rng);
  auto a = x, b = x;
  ref::scale(a.data(), 333, 33.94f);
  cpu::scale(b.data(), 333, 33.94f);
  EXPECT_EQ(a, b);
  EXPECT_FLOAT_EQ(a[7], x[7] * 33.94f);
}

TEST(KernelsTest, SoftcapAndSigmoidGateRowsMatchReference) {
  std::mt19937 rng(23);
  auto x = random_floats(300, rng);
  for (float& v : x) v *= 40.0f;  // into tanh's flat tails
  auto a = x, b = x;
  ref::softcap(a.data(), 300, 30.0f);
  cpu::softcap(b.data(), 300, 30.0f);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_NEAR(b[i], a[i], 4e-6f * 30.0f) << x[i];
    ASSERT_LT(std::fabs(a[i]), 30.0f);
  }
  float small = 0.01f;
  ref::softcap(&small, 1, 30.0f);
  EXPECT_NEAR(small, 0.01f, 1e-7f);  // near zero it is the identity
  const int64_t n = 5, dim = 37;
  const auto rows = random_floats(static_cast<size_t>(n * dim), rng);
  const std::vector<float> gate = {-30.0f, -1.0f, 0.0f, 2.0f, 30.0f};
  auto want = rows, got = rows;
  ref::sigmoid_gate_rows(want.data(), gate.data(), n, dim);
  cpu::sigmoid_gate_rows(got.data(), gate.data(), n, dim);
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6f);
  EXPECT_FLOAT_EQ(want[2 * dim + 3], 0.5f * rows[2 * dim + 3]);  // sigmoid(0)
  EXPECT_FLOAT_EQ(want[4 * dim], rows[4 * dim]);                  // saturated open
}

TEST(KernelsTest, GeluMatchesReferenceInBothFormsGatedOrNot) {
  std::mt19937 rng(17);
  const int64_t n = 1000;
  auto x = random_floats(n, rng);
  for (float& v : x) v *= 12.0f;  // past the tails on both sides
  const auto up = random_floats(n, rng);
  for (bool tanh_form : {false, true}) {
    for (const float* u : {up.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> want(n), got = x;
      ref::gelu(x.data(), u, n, tanh_form, want.data());
      cpu::gelu(got.data(), u, n, tanh_form, got.data());
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << x[i];
    }
  }
  // The two forms differ (by up to ~1e-3 near |x| = 2), and both are x * Phi(x).
  float erf_v, tanh_v;
  const float at = 2.0f;
  ref::gelu(&at, nullptr, 1, false, &erf_v);
  ref::gelu(&at, nullptr, 1, true, &tanh_v);
  EXPECT_NEAR(erf_v, 1.9544997f, 1e-6f);
  EXPECT_NEAR(tanh_v, 1.9545977f, 1e-6f);
}

TEST(KernelsTest, RopeStylesAgreeUnderTheRowPermutation) {
  // Interleaved rope on rows permuted as llama.cpp's converter does equals half rope on
  // the original rows, permuted: the reason both containers compute one function.
  std::mt19937 rng(8);
  const int64_t hd = 8;
  std::vector<float> inv(hd / 2);
  for (int64_t i = 0; i < hd / 2; ++i) inv[i] = std::pow(10000.0f, -2.0f * i / hd);
  const int32_t pos = 9;
  auto half = random_floats(hd, rng);
  std::vector<float> inter(hd);
  for (int64_t i = 0; i < hd / 2; ++i) {
    inter[2 * i] = half[i];
    inter[2 * i + 1] = half[i + hd / 2];
  }
  ref::rope(half.data(), 1, 1, hd, hd, &pos, inv.data(), RopeStyle::kHalf);
  ref::rope(inter.data(), 1, 1, hd, hd, &pos, inv.data(), RopeStyle::kInterleaved);
  for (int64_t i = 0; i < hd / 2; ++i) {
    EXPECT_FLOAT_EQ(inter[2 * i], half[i]);
    EXPECT_FLOAT_EQ(inter[2 * i + 1], half[i + hd / 2]);
  }
}

// SwiGLU's vectorized e^x (fast_exp.h) against libm's, over the activations' usual range
// and far beyond it (where e^-g would overflow), in place as the engine runs it; every
// path gives the same bits.
TEST(KernelsTest, SwigluMatchesReference) {
  std::mt19937 rng(7);
  for (float scale : {6.0f, 100.0f}) {
    IsaGuard guard;
    const auto gate = random_floats(1037, rng, scale), up = random_floats(1037, rng);
    std::vector<float> first;
    for (cpu::CpuIsa isa : available_cpu_paths()) {
      ASSERT_TRUE(cpu::cpu_isa_force(isa));
      std::vector<float> out(gate.size());
      cpu::swiglu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), out.data());
      if (first.empty()) first = out;
      for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], first[i]) << cpu::cpu_isa_name(isa) << " at " << i;
    }
  }
  for (float scale : {6.0f, 100.0f}) {
    auto g = random_floats(1037, rng, scale);
    g[0] = 0.0f;
    g[1] = -0.0f;
    g[2] = 88.5f;
    g[3] = -88.5f;
    const auto u = random_floats(1037, rng);
    std::vector<float> want(g.size());
    ref::swiglu(g.data(), u.data(), static_cast<int64_t>(g.size()), want.data());
    cpu::swiglu(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data());
    for (size_t i = 0; i < want.size(); ++i) {
      // Below e^-87 the clamp gives ~1e-37 instead of smaller: nothing next to any sum.
      ASSERT_NEAR(g[i], want[i], 4e-7f * std::fabs(want[i]) + 1e-30f) << "scale " << scale << " at " << i;
    }
  }
}

// The log-normaliser's sum of a row of logits, against a double-precision sum of libm's
// exponentials: a vocabulary-sized row, a ragged one, one with -inf entries.
TEST(KernelsTest, SumExpBelowMatchesADoubleSum) {
  std::mt19937 rng(8);
  for (size_t n : {size_t{32000}, size_t{37}, size_t{151936}}) {
    auto l = random_floats(n, rng, 30.0f);
    if (n == 37) l[5] = -std::numeric_limits<float>::infinity();
    const float max = *std::max_element(l.begin(), l.end());
    double want = 0.0;
    for (float v : l) want += std::exp(static_cast<double>(v) - static_cast<double>(max));
    IsaGuard guard;
    std::optional<double> first;
    for (cpu::CpuIsa isa : available_cpu_paths()) {
      ASSERT_TRUE(cpu::cpu_isa_force(isa));
      const double got = cpu::sum_exp_below(l.data(), static_cast<int64_t>(n), max);
      EXPECT_NEAR(got, want, 1e-6 * want) << n << " logits on " << cpu::cpu_isa_name(isa);
      if (!first) first = got;
      EXPECT_EQ(got, *first) << cpu::cpu_isa_name(isa) << ": every path sums alike";
    }
  }
}

TEST(KernelsTest, PagedAttentionMatchesReferenceOnEveryPath) {
  IsaGuard guard;
  for (cpu::CpuIsa isa : available_cpu_paths()) {
    ASSERT_TRUE(cpu::cpu_isa_force(isa));
    std::mt19937 rng(11);
    struct Shape {
      int32_t heads, kv_heads, hd, bs, window;
      float softcap = 0.0f;
    };
    // Ragged head sizes (not multiples of any vector), GQA and MHA, small and large
    // blocks, sliding windows that start inside a block, soft-capped scores (on shapes
    // that would otherwise take the register path).
    for (const Shape& s : {Shape{6, 2, 10, 4, 0}, Shape{6, 2, 10, 4, 5}, Shape{8, 2, 64, 16, 0},
                           Shape{4, 4, 67, 16, 0}, Shape{4, 1, 128, 16, 37}, Shape{3, 3, 33, 7, 0},
                           Shape{8, 2, 64, 16, 0, 1.5f}, Shape{4, 1, 128, 16, 37, 0.75f}}) {
      const int32_t n_blocks = 16;
      const int64_t kv_dim = static_cast<int64_t>(s.kv_heads) * s.hd;
      const auto k = random_floats(static_cast<size_t>(n_blocks * s.bs * kv_dim), rng);
      const auto v = random_floats(k.size(), rng);
      std::vector<int32_t> table(n_blocks);
      for (int32_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 7 + 3) % n_blocks;  // scattered
      const int32_t last = n_blocks * s.bs - 1;
      const std::vector<int32_t> positions = {0, 3, s.bs, last / 2, last - 1, last};
      const auto n = static_cast<int32_t>(positions.size());
      const auto q = random_floats(static_cast<size_t>(n * s.heads * s.hd), rng, 2.0f);
      std::vector<float> want(q.size()), got(q.size());
      AttentionParams p;
      p.q = q.data();
      p.k_cache = k.data();
      p.v_cache = v.data();
      p.block_table = table.data();
      p.positions = positions.data();
      p.block_size = s.bs;
      p.n_tokens = n;
      p.n_heads = s.heads;
      p.n_kv_heads = s.kv_heads;
      p.head_dim = s.hd;
      p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
      p.sliding_window = s.window;
      p.softcap = s.softcap;
      p.out = want.data();
      ref::attention(p);
      p.out = got.data();
      cpu::attention(p, 0, 1);
      cpu::attention(p, 1, s.heads);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 2e-5f) << cpu::cpu_isa_name(isa) << " hd " << s.hd << " window " << s.window
                                            << " softcap " << s.softcap << " at " << i;
      }
      if (s.softcap > 0.0f) {  // the cap changes the result
        std::vector<float> uncapped(q.size());
        AttentionParams plain = p;
        plain.softcap = 0.0f;
        plain.out = uncapped.data();
        ref::attention(plain);
        double diff = 0.0;
        for (size_t i = 0; i < want.size(); ++i) diff = std::max(diff, static_cast<double>(std::fabs(uncapped[i] - want[i])));
        EXPECT_GT(diff, 1e-3) << "softcap " << s.softcap;
      }
      // A query alone gives exactly what it gives among the others.
      std::vector<float> alone(static_cast<size_t>(s.heads * s.hd));
      AttentionParams one = p;
      one.n_tokens = 1;
      one.q = q.data() + static_cast<size_t>(3 * s.heads * s.hd);
      one.positions = positions.data() + 3;
      one.out = alone.data();
      cpu::attention(one, 0, s.heads);
      for (size_t i = 0; i < alone.size(); ++i) ASSERT_EQ(alone[i], got[static_cast<size_t>(3 * s.heads * s.hd) + i]);
    }
  }
}

TEST(KernelsTest, AttentionOverOneKeyReturnsItsValue) {
  const float q[2] = {1.0f, 2.0f}, k[2] = {0.5f, 0.5f}, v[2] = {3.0f, -4.0f};
  float out[2];
  const int32_t table = 0, pos = 0;
  AttentionParams p;
  p.q = q;
  p.out = out;
  p.k_cache = k;
  p.v_cache = v;
  p.block_table = &table;
  p.positions = &pos;
  p.block_size = 1;
  p.n_tokens = 1;
  p.n_heads = p.n_kv_heads = 1;
  p.head_dim = 2;
  cpu::attention(p, 0, 1);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
  EXPECT_FLOAT_EQ(out[1], -4.0f);
}


// ---- KV cache dtypes -------------------------------------------------------------

// A shape of attention tests: ragged head sizes (not multiples of any vector), GQA and
// MHA, small and large blocks, sliding windows that start inside a block.
struct AttentionShape {
  int32_t heads, kv_heads, hd, bs, window;
};
constexpr AttentionShape kAttentionShapes[] = {{6, 2, 10, 4, 0},   {6, 2, 10, 4, 5},  {8, 2, 64, 16, 0},
                                               {4, 4, 67, 16, 0},  {4, 1, 128, 16, 37}, {3, 3, 33, 7, 0},
                                               {8, 8, 128, 32, 0}, {2, 1, 20, 300, 0}};

// A cache of `n` elements of `type` (bytes).
std::vector<std::byte> kv_cache_bytes(KvDType type, size_t n) {
  return std::vector<std::byte>(n * static_cast<size_t>(kv_dtype_bytes(type)));
}

// Element i of a cache of `type`, widened to float.
float kv_element(const std::vector<std::byte>& cache, KvDType type, size_t i) {
  if (type == KvDType::kF32) return reinterpret_cast<const float*>(cache.data())[i];
  const uint16_t h = reinterpret_cast<const uint16_t*>(cache.data())[i];
  return type == KvDType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

// Random K and V rows of every slot of a cache of n_blocks blocks, stored by kv_store in
// a scattered slot order; returns the f32 rows (slot-major) it stored.
struct StoredCache {
  std::vector<std::byte> k, v;
};
StoredCache store_random_kv(KvDType type, const AttentionShape& s, int32_t n_blocks, std::mt19937& rng,
                            std::vector<float>* k_rows = nullptr, std::vector<float>* v_rows = nullptr) {
  const int32_t n_slots = n_blocks * s.bs;
  const int64_t kv_dim = static_cast<int64_t>(s.kv_heads) * s.hd;
  const auto k = random_floats(static_cast<size_t>(n_slots * kv_dim), rng);
  const auto v = random_floats(k.size(), rng);
  std::vector<int32_t> slots(static_cast<size_t>(n_slots));
  for (int32_t i = 0; i < n_slots; ++i) slots[static_cast<size_t>(i)] = (i * 11 + 3) % n_slots;  // a permutation: no n_slots here is a multiple of 11
  StoredCache c{kv_cache_bytes(type, k.size()), kv_cache_bytes(type, k.size())};
  KvStoreParams st{.k = k.data(),
                   .v = v.data(),
                   .k_cache = c.k.data(),
                   .v_cache = c.v.data(),
                   .slots = slots.data(),
                   .n_tokens = n_slots,
                   .n_kv_heads = s.kv_heads,
                   .head_dim = s.hd,
                   .block_size = s.bs,
                   .kv_dtype = type};
  cpu::kv_store(st);
  if (k_rows != nullptr) *k_rows = k;
  if (v_rows != nullptr) *v_rows = v;
  return c;
}

// Attention parameters of shape `s` over `c` for queries at `positions`.
AttentionParams attention_params(const AttentionShape& s, KvDType type, const StoredCache& c, const float* q,
                                 const std::vector<int32_t>& table, const std::vector<int32_t>& positions) {
  AttentionParams p;
  p.q = q;
  p.k_cache = c.k.data();
  p.v_cache = c.v.data();
  p.kv_dtype = type;
  p.block_table = table.data();
  p.positions = positions.data();
  p.block_size = s.bs;
  p.n_tokens = static_cast<int32_t>(positions.size());
  p.n_heads = s.heads;
  p.n_kv_heads = s.kv_heads;
  p.head_dim = s.hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(s.hd));
  p.sliding_window = s.window;
  return p;
}

TEST(KvDTypeTest, SizesAndNames) {
  EXPECT_EQ(kv_dtype_bytes(KvDType::kF32), 4);
  EXPECT_EQ(kv_dtype_bytes(KvDType::kF16), 2);
  EXPECT_EQ(kv_dtype_bytes(KvDType::kBF16), 2);
  EXPECT_EQ(kv_dtype_bytes(static_cast<KvDType>(7)), 0);
  EXPECT_STREQ(kv_dtype_name(KvDType::kF32), "f32");
  EXPECT_STREQ(kv_dtype_name(KvDType::kF16), "f16");
  EXPECT_STREQ(kv_dtype_name(KvDType::kBF16), "bf16");
  EXPECT_STREQ(kv_dtype_name(static_cast<KvDType>(7)), "unsupported");
  EXPECT_EQ(AttentionParams{}.kv_dtype, KvDType::kF32);
  EXPECT_EQ(KvStoreParams{}.kv_dtype, KvDType::kF32);
}

class KvStoreTest : public ::testing::TestWithParam<KvDType> {};

// The CPU store writes the reference's bytes, rounding specials included, into the slots
// it is given and nowhere else.
TEST_P(KvStoreTest, MatchesTheReferenceBitForBit) {
  const KvDType type = GetParam();
  std::mt19937 rng(21);
  for (const AttentionShape& s : kAttentionShapes) {
    const int32_t n_blocks = 5, n_slots = n_blocks * s.bs;
    const int64_t kv_dim = static_cast<int64_t>(s.kv_heads) * s.hd;
    const int64_t n_tokens = std::min(n_slots, 9);
    auto k = random_floats(static_cast<size_t>(n_tokens * kv_dim), rng, 3.0f);
    auto v = random_floats(k.size(), rng, 3.0f);
    // Values every conversion must round alike: ties (f16 and bf16), f16 subnormals and
    // underflow, overflow to infinity, infinities, NaN, signed zero.
    const float specials[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
                              0x1p-20f,        -0x1.8p-24f,         0x1p-26f,       65504.0f,
                              65520.0f,        -1e30f,              INFINITY,       -INFINITY,
                              NAN,             -0.0f,               3e38f,          1e-40f};
    for (size_t i = 0; i < std::size(specials) && i < k.size(); ++i) {
      k[i * 3 % k.size()] = specials[i];
      v[(i * 5 + 1) % v.size()] = specials[i];
    }
    std::vector<int32_t> slots(static_cast<size_t>(n_tokens));
    for (int64_t t = 0; t < n_tokens; ++t) slots[static_cast<size_t>(t)] = static_cast<int32_t>((t * 11 + 2) % n_slots);
    const size_t elems = static_cast<size_t>(n_slots * kv_dim);
    auto want_k = kv_cache_bytes(type, elems), want_v = want_k;
    for (size_t i = 0; i < want_k.size(); ++i) want_k[i] = want_v[i] = static_cast<std::byte>(i * 37 + 5);
    auto got_k = want_k, got_v = want_v;
    KvStoreParams p{.k = k.data(),
                    .v = v.data(),
                    .k_cache = want_k.data(),
                    .v_cache = want_v.data(),
                    .slots = slots.data(),
                    .n_tokens = n_tokens,
                    .n_kv_heads = s.kv_heads,
                    .head_dim = s.hd,
                    .block_size = s.bs,
                    .kv_dtype = type};
    ref::kv_store(p);
    p.k_cache = got_k.data();
    p.v_cache = got_v.data();
    cpu::kv_store(p);
    ASSERT_EQ(got_k, want_k) << kv_dtype_name(type) << " hd " << s.hd << " bs " << s.bs;
    ASSERT_EQ(got_v, want_v) << kv_dtype_name(type) << " hd " << s.hd << " bs " << s.bs;
    // Where each element went: the layouts of attention_params.h, converted as half.h does.
    for (int64_t t = 0; t < n_tokens; ++t) {
      const int64_t block = slots[static_cast<size_t>(t)] / s.bs;
      const int32_t offset = slots[static_cast<size_t>(t)] % s.bs;
      for (int32_t h = 0; h < s.kv_heads; ++h) {
        for (int32_t d = 0; d < s.hd; ++d) {
          const float x = k[static_cast<size_t>(t * kv_dim + h * s.hd + d)];
          const float want = type == KvDType::kF32   ? x
                             : type == KvDType::kF16 ? fp16_to_f32(f32_to_fp16(x))
                                                     : bf16_to_f32(f32_to_bf16(x));
          const float got = kv_element(got_k, type,
                                       static_cast<size_t>(kv_key_index(block, h, d, offset, s.kv_heads, s.hd, s.bs)));
          if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(got));
          } else {
            ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << x;
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllKvDTypes, KvStoreTest, ::testing::Values(KvDType::kF32, KvDType::kF16, KvDType::kBF16),
                         [](const auto& p) { return std::string(kv_dtype_name(p.param)); });

// Attention over an f16 or bf16 cache on one instruction-set path.
class KvDTypeAttentionTest : public ::testing::TestWithParam<std::tuple<cpu::CpuIsa, KvDType>> {};

// Given the same cache bytes, every path matches the reference as closely as the f32
// cache does (PagedAttentionMatchesReferenceOnEveryPath), and gives exactly what the f32
// kernel gives on the widened values, so every path is bit-identical to every other.
TEST_P(KvDTypeAttentionTest, MatchesTheReferenceAndTheF32KernelOnTheWidenedValues) {
  const auto [isa, type] = GetParam();
  IsaGuard guard;
  if (!cpu::cpu_isa_force(isa)) {
    GTEST_SKIP() << "this CPU lacks the " << cpu::cpu_isa_name(isa) << " path (has: " << testing::cpu_paths_covered()
                 << ")";
  }
  std::mt19937 rng(31 + static_cast<int>(type));
  for (const AttentionShape& s : kAttentionShapes) {
    const int32_t n_blocks = s.bs > 100 ? 3 : 16;
    const StoredCache c = store_random_kv(type, s, n_blocks, rng);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (int32_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 7 + 3) % n_blocks;
    const int32_t last = n_blocks * s.bs - 1;
    const std::vector<int32_t> positions = {0, 3, s.bs, last / 2, last - 1, last};
    const auto q = random_floats(positions.size() * static_cast<size_t>(s.heads * s.hd), rng, 2.0f);
    std::vector<float> want(q.size()), got(q.size()), widened_out(q.size());
    AttentionParams p = attention_params(s, type, c, q.data(), table, positions);
    p.out = want.data();
    ref::attention(p);
    p.out = got.data();
    cpu::attention(p, 0, 1);
    cpu::attention(p, 1, s.heads);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 2e-5f) << kv_dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << " hd "
                                          << s.hd << " bs " << s.bs << " window " << s.window << " at " << i;
    }
    StoredCache widened{kv_cache_bytes(KvDType::kF32, c.k.size() / 2), kv_cache_bytes(KvDType::kF32, c.v.size() / 2)};
    for (size_t i = 0; i < c.k.size() / 2; ++i) {
      reinterpret_cast<float*>(widened.k.data())[i] = kv_element(c.k, type, i);
      reinterpret_cast<float*>(widened.v.data())[i] = kv_element(c.v, type, i);
    }
    AttentionParams f32 = attention_params(s, KvDType::kF32, widened, q.data(), table, positions);
    f32.out = widened_out.data();
    cpu::attention(f32, 0, s.heads);
    ASSERT_EQ(got, widened_out) << kv_dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << " hd " << s.hd;
  }
}

INSTANTIATE_TEST_SUITE_P(
    PathsAndNarrowTypes, KvDTypeAttentionTest,
    ::testing::Combine(::testing::Values(cpu::CpuIsa::kScalar, cpu::CpuIsa::kAvx2, cpu::CpuIsa::kAvx512),
                       ::testing::Values(KvDType::kF16, KvDType::kBF16)),
    [](const auto& p) {
      return std::string(cpu::cpu_isa_name(std::get<0>(p.param))) + "_" + kv_dtype_name(std::get<1>(p.param));
    });

// Every path computes each (query, head) with the same float operations in the same
// order, so the vector paths give the scalar path's bits, whatever the cache dtype,
// however the heads are split across calls, and over the shapes the vector paths take
// whole blocks at a time for (head_dim 64 and 128, blocks of 16, GQA groups of 1-8).
TEST(KvDTypeTest, EveryPathGivesTheScalarPathsBits) {
  IsaGuard guard;
  std::vector<AttentionShape> shapes(std::begin(kAttentionShapes), std::end(kAttentionShapes));
  for (const AttentionShape s : {AttentionShape{32, 8, 64, 16, 0}, AttentionShape{16, 2, 64, 16, 0},
                                 AttentionShape{24, 3, 128, 16, 0}, AttentionShape{10, 2, 128, 16, 21},
                                 AttentionShape{7, 7, 64, 16, 0}, AttentionShape{6, 2, 64, 16, 40}}) {
    shapes.push_back(s);
  }
  for (const KvDType type : {KvDType::kF32, KvDType::kF16, KvDType::kBF16}) {
    for (const AttentionShape& s : shapes) {
      const int32_t n_blocks = s.bs > 100 ? 3 : 12;
      std::mt19937 rng(53);
      const StoredCache c = store_random_kv(type, s, n_blocks, rng);
      std::vector<int32_t> table(static_cast<size_t>(n_blocks));
      for (int32_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 5 + 2) % n_blocks;
      const int32_t last = n_blocks * s.bs - 1;
      const std::vector<int32_t> positions = {0, 15, 16, 17, last / 2, last - 16, last};
      const auto q = random_floats(positions.size() * static_cast<size_t>(s.heads * s.hd), rng, 4.0f);
      AttentionParams p = attention_params(s, type, c, q.data(), table, positions);
      std::vector<float> want(q.size());
      ASSERT_TRUE(cpu::cpu_isa_force(cpu::CpuIsa::kScalar));
      p.out = want.data();
      cpu::attention(p, 0, s.heads);
      for (cpu::CpuIsa isa : available_cpu_paths()) {
        ASSERT_TRUE(cpu::cpu_isa_force(isa));
        std::vector<float> whole(q.size()), split(q.size());
        p.out = whole.data();
        cpu::attention(p, 0, s.heads);
        const int32_t cut = std::min(3, s.heads - 1);  // inside a group of query heads where there is one
        p.out = split.data();
        cpu::attention(p, 0, cut);
        cpu::attention(p, cut, s.heads);
        EXPECT_EQ(whole, want) << kv_dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ", heads " << s.heads
                               << "/" << s.kv_heads << " hd " << s.hd << " bs " << s.bs;
        EXPECT_EQ(split, want) << kv_dtype_name(type) << " on " << cpu::cpu_isa_name(isa) << ", heads split at " << cut;
      }
    }
  }
}

// What storing the cache narrower costs: attention over the f16 (bf16) cache stays
// within a stated distance of attention over the f32 cache of the same K and V rows.
// Elements in [-1, 1] round by at most 2^-12 (bf16: 2^-9), half a unit in the last
// place; the output, a convex combination of value rows, moves by about that much plus
// what the rounded keys do to the weights. The tolerances are 4x the worst cases
// measured over these shapes (f16 2.4e-4, bf16 2.1e-3).
TEST(KvDTypeTest, NarrowCachesStayCloseToTheF32Cache) {
  IsaGuard guard;
  for (const KvDType type : {KvDType::kF16, KvDType::kBF16}) {
    const float tolerance = type == KvDType::kF16 ? 1e-3f : 8e-3f;
    for (const AttentionShape& s : kAttentionShapes) {
      const int32_t n_blocks = s.bs > 100 ? 3 : 16;
      std::mt19937 rng(41);
      const StoredCache exact = store_random_kv(KvDType::kF32, s, n_blocks, rng);
      rng.seed(41);  // the same K and V rows
      const StoredCache narrow = store_random_kv(type, s, n_blocks, rng);
      std::vector<int32_t> table(static_cast<size_t>(n_blocks));
      for (int32_t i = 0; i < n_blocks; ++i) table[static_cast<size_t>(i)] = (i * 5 + 1) % n_blocks;
      const int32_t last = n_blocks * s.bs - 1;
      const std::vector<int32_t> positions = {0, 5, last / 3, last};
      const auto q = random_floats(positions.size() * static_cast<size_t>(s.heads * s.hd), rng, 2.0f);
      std::vector<float> want(q.size()), got(q.size());
      AttentionParams p = attention_params(s, KvDType::kF32, exact, q.data(), table, positions);
      p.out = want.data();
      cpu::attention(p, 0, s.heads);
      p = attention_params(s, type, narrow, q.data(), table, positions);
      p.out = got.data();
      cpu::attention(p, 0, s.heads);
      float worst = 0.0f;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
      EXPECT_LE(worst, tolerance) << kv_dtype_name(type) << " hd " << s.hd << " bs " << s.bs;
      RecordProperty(std::string("worst_") + kv_dtype_name(type) + "_hd" + std::to_string(s.hd) + "_bs" +
                         std::to_string(s.bs),
                     std::to_string(worst));
    }
  }
}

}  // namespace
}  // namespace hearth::kernels

namespace hearth::kernels {
namespace {

// LoRA products of one matrix over a batch whose rows use three adapter slots (ranks 3,
// 8 and 16, the middle one not adapting this matrix) and none: every path gives the
// reference's values, and all paths the same bits; rows without an adapter stay as they were.
TEST(KernelsTest, LoraProductsMatchTheReferenceOnEveryPathAndLeaveOtherRowsAlone) {
  testing::CpuIsaGuard guard;
  std::mt19937 rng(77);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{64, 64}, {67, 133}, {256, 40}}) {
    const int32_t ranks[] = {3, 8, 16};
    const int32_t max_rank = 16;
    std::vector<std::vector<float>> a(3), b(3);
    std::vector<LoraFactors> factors(3);
    for (size_t s = 0; s < 3; ++s) {
      a[s] = random_floats(static_cast<size_t>(ranks[s] * in), rng);
      b[s] = random_floats(static_cast<size_t>(out * ranks[s]), rng);
      factors[s] = {a[s].data(), b[s].data(), ranks[s], 0.5f + static_cast<float>(s)};
    }
    factors[1].a = nullptr;  // slot 1's adapter leaves this matrix alone
    const int64_t n = 11;
    const std::vector<int32_t> slot = {0, -1, 2, 2, 1, 0, -1, 2, 0, 1, 2};
    const auto x = random_floats(static_cast<size_t>(n * in), rng);
    const auto y0 = random_floats(static_cast<size_t>(n * out), rng);
    std::vector<float> want = y0, scratch(static_cast<size_t>(n * max_rank));
    LoraProduct p{.x = x.data(), .y = want.data(), .row_slot = slot.data(), .factors = factors.data(),
                  .scratch = scratch.data(), .n = n, .in = in, .out = out, .n_slots = 3, .max_rank = max_rank};
    ref::lora(p);
    for (int64_t t = 0; t < n; ++t) {
      const bool adapted = slot[static_cast<size_t>(t)] == 0 || slot[static_cast<size_t>(t)] == 2;
      for (int64_t o = 0; o < out; ++o) {
        const size_t i = static_cast<size_t>(t * out + o);
        if (!adapted) {
          ASSERT_EQ(want[i], y0[i]) << "row " << t << " has no adapter of this matrix";
        }
      }
      if (adapted) {
        EXPECT_NE(want[static_cast<size_t>(t * out)], y0[static_cast<size_t>(t * out)]);
      }
    }
    std::optional<std::vector<float>> first;
    for (cpu::CpuIsa isa : testing::available_cpu_paths()) {
      ASSERT_TRUE(cpu::cpu_isa_force(isa));
      std::vector<float> got = y0;
      p.y = got.data();
      cpu::lora_rows(p, 0, 4);  // in two parts, as the backend's threads split it
      cpu::lora_rows(p, 4, n);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f * static_cast<float>(in))
            << cpu::cpu_isa_name(isa) << " " << in << "x" << out << " at " << i;
      }
      if (first) {
        ASSERT_EQ(got, *first) << cpu::cpu_isa_name(isa) << " differs from the first path in some bit";
      } else {
        first = got;
      }
      // Grouped by slot and split over rank rows and outputs (as the backend's threads
      // split it): the same bits.
      std::vector<float> grouped = y0;
      p.y = grouped.data();
      for (int32_t s : {0, 2}) {
        std::vector<int32_t> rows;
        for (int32_t t = 0; t < n; ++t) {
          if (slot[static_cast<size_t>(t)] == s) rows.push_back(t);
        }
        const LoraFactors& f = factors[static_cast<size_t>(s)];
        cpu::lora_shrink(p, f, rows.data(), static_cast<int64_t>(rows.size()), 0, 2);
        cpu::lora_shrink(p, f, rows.data(), static_cast<int64_t>(rows.size()), 2, f.rank);
        cpu::lora_expand(p, f, rows.data(), static_cast<int64_t>(rows.size()), 0, out / 3);
        cpu::lora_expand(p, f, rows.data(), static_cast<int64_t>(rows.size()), out / 3, out);
      }
      ASSERT_EQ(grouped, got) << cpu::cpu_isa_name(isa) << ": grouped rows differ in some bit";
    }
  }
}

}  // namespace
}  // namespace hearth::kernels
