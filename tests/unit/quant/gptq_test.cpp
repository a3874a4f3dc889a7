// GPTQ and round-to-nearest on single matrices: the grid, the exactness of the stored
// values, GPTQ's lower reconstruction error on correlated inputs, and bad input.
#include "quant/gptq.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "common/half.h"
#include "engine/cpu/thread_pool.h"

namespace hearth::quant {
namespace {

std::vector<float> random_matrix(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (auto& v : w) v = d(rng);
  return w;
}

// Inputs with correlated columns and uneven scales (as real activations have), and their
// Hessian.
std::vector<double> correlated_hessian(int64_t cols, int64_t n, std::mt19937& rng, ThreadPool* pool = nullptr) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (int64_t t = 0; t < n; ++t) {
    const float shared = d(rng);
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = 0.2f + static_cast<float>(c % 7);
      x[static_cast<size_t>(t * cols + c)] = scale * (0.7f * shared + 0.3f * d(rng));
    }
  }
  Hessian h(cols);
  h.add(x.data(), n / 2, pool);
  h.add(x.data() + (n / 2) * cols, n - n / 2, pool);
  EXPECT_EQ(h.samples(), n);
  return h.matrix();
}

TEST(GptqTest, RoundToNearestFollowsTheGrid) {
  std::mt19937 rng(1);
  const int64_t rows = 8, cols = 64;
  std::vector<float> w = random_matrix(rows, cols, rng);
  for (bool sym : {true, false}) {
    for (int bits : {4, 8}) {
      const QuantScheme s{bits, 32, sym};
      auto m = rtn_quantize(w, rows, cols, s);
      ASSERT_TRUE(m.is_ok()) << m.status().to_string();
      const int32_t maxq = (1 << bits) - 1;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t g = 0; g < 2; ++g) {
          float lo = 0.0f, hi = 0.0f;
          for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
            lo = std::min(lo, w[static_cast<size_t>(r * cols + c)]);
            hi = std::max(hi, w[static_cast<size_t>(r * cols + c)]);
          }
          if (sym) hi = std::max(hi, -lo), lo = -hi;
          const float scale = fp16_to_f32(m->scales[static_cast<size_t>(g * rows + r)]);
          EXPECT_EQ(scale, fp16_to_f32(f32_to_fp16((hi - lo) / static_cast<float>(maxq))));
          const int32_t zero = m->zeros[static_cast<size_t>(g * rows + r)];
          if (sym) {
            EXPECT_EQ(zero, (maxq + 1) / 2);
          }
          for (int64_t c = g * 32; c < (g + 1) * 32; ++c) {
            const float x = w[static_cast<size_t>(r * cols + c)];
            const int32_t q = m->q[static_cast<size_t>(r * cols + c)];
            EXPECT_EQ(q, std::clamp(static_cast<int32_t>(std::nearbyint(x / scale)) + zero, 0, maxq));
            EXPECT_EQ(m->value(r, c), scale * static_cast<float>(q - zero));
          }
        }
      }
      EXPECT_TRUE(m->groups_in_order());
      const std::vector<float> all = m->dequantize();
      EXPECT_EQ(all[5 * cols + 40], m->value(5, 40));
    }
  }
}

TEST(GptqTest, WithoutCorrelationGptqIsRoundToNearest) {
  // H = I: no column's error can be spread over others, so GPTQ must choose RTN's codes.
  std::mt19937 rng(2);
  const int64_t rows = 16, cols = 256;
  const std::vector<float> w = random_matrix(rows, cols, rng);
  std::vector<double> h(static_cast<size_t>(cols * cols), 0.0);
  for (int64_t c = 0; c < cols; ++c) h[static_cast<size_t>(c * cols + c)] = 1.0;
  for (int bits : {4, 8}) {
    const QuantScheme s{bits, 64, true};
    auto g = gptq_quantize(w, rows, cols, h, s);
    auto r = rtn_quantize(w, rows, cols, s);
    ASSERT_TRUE(g.is_ok() && r.is_ok());
    EXPECT_EQ(g->q, r->q);
    EXPECT_EQ(g->scales, r->scales);
    EXPECT_EQ(g->zeros, r->zeros);
  }
}

TEST(GptqTest, GptqLowersTheReconstructionErrorOnCorrelatedInputs) {
  std::mt19937 rng(3);
  ThreadPool pool(2);
  const int64_t rows = 48, cols = 256;
  const std::vector<float> w = random_matrix(rows, cols, rng);
  const std::vector<double> h = correlated_hessian(cols, 2048, rng, &pool);
  const QuantScheme schemes[] = {{4, 32, true}, {4, 128, true}, {4, 128, false}, {8, 32, true},
                                 {4, 32, true, true, true}, {4, 64, false, true, false}};
  for (const QuantScheme& s : schemes) {
    auto g = gptq_quantize(w, rows, cols, h, s, 0.01, &pool);
    ASSERT_TRUE(g.is_ok()) << scheme_name(s) << ": " << g.status().to_string();
    auto r = rtn_quantize(w, rows, cols, QuantScheme{s.bits, s.group_size, s.sym});
    ASSERT_TRUE(r.is_ok());
    const double eg = reconstruction_error(w, *g, h), er = reconstruction_error(w, *r, h);
    EXPECT_LT(eg, 0.8 * er) << scheme_name(s) << ": GPTQ " << eg << ", RTN " << er;
    // The same run on one thread gives the same codes.
    auto single = gptq_quantize(w, rows, cols, h, s, 0.01, nullptr);
    ASSERT_TRUE(single.is_ok());
    EXPECT_EQ(single->q, g->q) << scheme_name(s);
    // Groups: whole groups of group_size columns; in column order unless act-order
    // takes them in its own order.
    std::vector<int> per_group(static_cast<size_t>(cols / s.group_size), 0);
    for (int32_t gi : g->g_idx) ++per_group.at(static_cast<size_t>(gi));
    for (int n : per_group) EXPECT_EQ(n, s.group_size);
    EXPECT_EQ(g->groups_in_order(), !s.act_order || s.static_groups) << scheme_name(s);
  }
}

TEST(GptqTest, OneFactorServesEveryMatrixOfAnInput) {
  // q, k and v read the same input: one factor, the same codes as each on its own.
  std::mt19937 rng(6);
  const int64_t cols = 128;
  const std::vector<double> h = correlated_hessian(cols, 1024, rng);
  for (bool act_order : {false, true}) {
    const QuantScheme s{4, 32, true, act_order, act_order};
    auto f = gptq_factor(h, cols, act_order, 0.01);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    for (int64_t rows : {32, 8}) {
      const std::vector<float> w = random_matrix(rows, cols, rng);
      auto shared = gptq_quantize(w, rows, cols, *f, s);
      auto alone = gptq_quantize(w, rows, cols, h, s);
      ASSERT_TRUE(shared.is_ok() && alone.is_ok());
      EXPECT_EQ(shared->q, alone->q);
      EXPECT_EQ(shared->scales, alone->scales);
    }
  }
  auto f = gptq_factor(h, cols, false, 0.01);
  ASSERT_TRUE(f.is_ok());
  const std::vector<float> wide = random_matrix(4, 256, rng);
  EXPECT_FALSE(gptq_quantize(wide, 4, 256, *f, {4, 32, true}).is_ok());
  EXPECT_FALSE(gptq_factor(std::vector<double>(10), cols, false, 0.01).is_ok());
}

TEST(GptqTest, DeadColumnsAreZero) {
  std::mt19937 rng(4);
  const int64_t rows = 4, cols = 64;
  const std::vector<float> w = random_matrix(rows, cols, rng);
  std::vector<double> h = correlated_hessian(cols, 512, rng);
  for (int64_t c = 0; c < cols; ++c) {  // column 10 never sees an input
    h[static_cast<size_t>(10 * cols + c)] = 0.0;
    h[static_cast<size_t>(c * cols + 10)] = 0.0;
  }
  auto g = gptq_quantize(w, rows, cols, h, {4, 32, true});
  ASSERT_TRUE(g.is_ok());
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(g->value(r, 10), 0.0f);
}

TEST(GptqTest, BadInputIsRefused) {
  std::mt19937 rng(5);
  const std::vector<float> w = random_matrix(4, 96, rng);
  const std::vector<double> h = correlated_hessian(96, 256, rng);
  auto expect_error = [](const Result<QuantizedMatrix>& r, const std::string& words) {
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  expect_error(rtn_quantize(w, 4, 96, {4, 64, true}), "do not divide");
  expect_error(gptq_quantize(w, 4, 96, h, {4, 64, true}), "do not divide");
  expect_error(rtn_quantize(w, 4, 96, {3, 32, true}), "--bits");
  expect_error(rtn_quantize(w, 4, 96, {4, 48, true}), "--group-size");
  expect_error(rtn_quantize(w, 4, 96, {4, 32, true, false, true}), "--static-groups");
  expect_error(rtn_quantize(w, 4, 96, {4, 32, true, true}), "--method gptq");
  expect_error(rtn_quantize(w, 5, 96, {4, 32, true}), "cannot hold");
  expect_error(gptq_quantize(w, 4, 96, std::vector<double>(10), {4, 32, true}), "Hessian");
  expect_error(gptq_quantize(w, 4, 96, h, {4, 32, true}, 0.0), "--damp");
  // Not positive definite, whatever the dampening: an off-diagonal pair far larger than
  // the diagonal.
  std::vector<double> bad = h;
  bad[1] = bad[96] = 1e9;
  expect_error(gptq_quantize(w, 4, 96, bad, {4, 32, true}, 0.01), "positive definite");
}

}  // namespace
}  // namespace hearth::quant
