#include "engine/core/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace hearth {
namespace {

std::vector<float> logits_of(std::initializer_list<float> v) { return std::vector<float>(v); }

TEST(SamplerTest, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  Sampler s({.temperature = 0.0f}, 4);
  auto l = logits_of({1.0f, 3.0f, 3.0f, -1.0f});
  const auto t = s.sample(l, {}, {});
  EXPECT_EQ(t.id, 1);
  const double expected = 3.0 - std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-1.0));
  EXPECT_NEAR(t.logprob, expected, 1e-5);
}

TEST(SamplerTest, SameSeedSameTokensDifferentSeedDifferentStream) {
  std::vector<TokenId> a, b, c;
  Sampler sa({.temperature = 1.0f, .seed = 7}, 50), sb({.temperature = 1.0f, .seed = 7}, 50),
      sc({.temperature = 1.0f, .seed = 8}, 50);
  for (int i = 0; i < 64; ++i) {
    std::vector<float> l(50, 0.0f);
    auto l2 = l, l3 = l;
    a.push_back(sa.sample(l, {}, {}).id);
    b.push_back(sb.sample(l2, {}, {}).id);
    c.push_back(sc.sample(l3, {}, {}).id);
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST(SamplerTest, TopKKeepsOnlyTheKBest) {
  // 1000 tokens, two of them barely ahead of the rest: without top-k a draw lands on one
  // of the two with probability ~0.2%, so 500 draws all there cannot happen by chance.
  constexpr int kVocab = 1000;
  std::vector<float> base(kVocab, 0.9f);
  base[7] = 1.0f;
  base[500] = 1.0f;
  Sampler s({.temperature = 1.0f, .top_k = 2, .seed = 1}, kVocab);
  std::map<TokenId, int> counts;
  for (int i = 0; i < 500; ++i) {
    auto l = base;
    ++counts[s.sample(l, {}, {}).id];
  }
  EXPECT_EQ(counts.size(), 2u) << "only the two best, and both of them";
  EXPECT_GT(counts[7], 150);
  EXPECT_GT(counts[500], 150);
}

TEST(SamplerTest, TopPCutsTheTail) {
  // Probabilities about 0.5, 0.3, 0.2 (log of those): top_p 0.7 keeps the first two.
  Sampler s({.temperature = 1.0f, .top_p = 0.7f, .seed = 3}, 3);
  std::map<TokenId, int> counts;
  for (int i = 0; i < 2000; ++i) {
    auto l = logits_of({std::log(0.5f), std::log(0.3f), std::log(0.2f)});
    ++counts[s.sample(l, {}, {}).id];
  }
  EXPECT_EQ(counts[2], 0);
  EXPECT_NEAR(counts[0] / 2000.0, 0.5 / 0.8, 0.05);
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  Sampler s({.temperature = 1.0f, .min_p = 0.6f, .seed = 3}, 3);
  for (int i = 0; i < 500; ++i) {
    auto l = logits_of({std::log(0.6f), std::log(0.35f), std::log(0.05f)});
    EXPECT_EQ(s.sample(l, {}, {}).id, 0);  // 0.35 < 0.6 * 0.6
  }
}

TEST(SamplerTest, TemperatureSharpensAndFlattens) {
  std::map<TokenId, int> cold, hot;
  Sampler c({.temperature = 0.25f, .seed = 5}, 2), h({.temperature = 4.0f, .seed = 5}, 2);
  for (int i = 0; i < 2000; ++i) {
    auto l1 = logits_of({1.0f, 0.0f}), l2 = l1;
    ++cold[c.sample(l1, {}, {}).id];
    ++hot[h.sample(l2, {}, {}).id];
  }
  EXPECT_GT(cold[0], 1900);  // p = 1 / (1 + e^-4) = 0.982
  EXPECT_NEAR(hot[0] / 2000.0, 1.0 / (1.0 + std::exp(-0.25)), 0.04);
}

TEST(SamplerTest, PenaltiesFollowTheirDefinitions) {
  const std::vector<TokenId> prompt = {0}, output = {1, 1, 2};
  Sampler rep({.temperature = 0.0f, .repetition_penalty = 2.0f}, 4);
  auto l = logits_of({4.0f, 4.0f, -1.0f, 3.0f});
  rep.sample(l, prompt, output);
  EXPECT_FLOAT_EQ(l[0], 2.0f);   // positive: divided
  EXPECT_FLOAT_EQ(l[1], 2.0f);
  EXPECT_FLOAT_EQ(l[2], -2.0f);  // negative: multiplied
  EXPECT_FLOAT_EQ(l[3], 3.0f);   // unseen: unchanged

  Sampler pf({.temperature = 0.0f, .presence_penalty = 0.5f, .frequency_penalty = 0.25f}, 4);
  auto m = logits_of({4.0f, 4.0f, -1.0f, 3.0f});
  pf.sample(m, prompt, output);
  EXPECT_FLOAT_EQ(m[0], 4.0f);            // prompt tokens are not penalised
  EXPECT_FLOAT_EQ(m[1], 4.0f - 0.5f - 0.5f);
  EXPECT_FLOAT_EQ(m[2], -1.0f - 0.5f - 0.25f);
  // Penalty state does not leak into the next call.
  auto n = logits_of({4.0f, 4.0f, -1.0f, 3.0f});
  pf.sample(n, prompt, {});
  EXPECT_FLOAT_EQ(n[1], 4.0f);
}

TEST(SamplerTest, ValidationNamesTheParameter) {
  EXPECT_NE(sampling_params_validate({.temperature = -1.0f}).message().find("temperature"), std::string::npos);
  EXPECT_NE(sampling_params_validate({.top_p = 0.0f}).message().find("top_p"), std::string::npos);
  EXPECT_NE(sampling_params_validate({.min_p = 2.0f}).message().find("min_p"), std::string::npos);
  EXPECT_NE(sampling_params_validate({.top_k = -3}).message().find("top_k"), std::string::npos);
  EXPECT_NE(sampling_params_validate({.repetition_penalty = 0.0f}).message().find("repetition_penalty"),
            std::string::npos);
  EXPECT_NE(sampling_params_validate({.presence_penalty = 3.0f}).message().find("presence_penalty"),
            std::string::npos);
  EXPECT_FALSE(sampling_params_validate({.temperature = NAN}).is_ok());
  EXPECT_TRUE(sampling_params_validate({}).is_ok());
}

}  // namespace
}  // namespace hearth
