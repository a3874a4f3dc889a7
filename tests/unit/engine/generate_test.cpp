#include "engine/core/generate.h"

#include <gtest/gtest.h>

#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

struct Fixture {
  LoadedModel model;
  std::unique_ptr<Backend> backend = make_cpu_backend();
  std::unique_ptr<Model> llama;
  std::optional<KvCache> cache;

  explicit Fixture(int32_t blocks = 32, int32_t max_batch = 4) {
    model = std::move(model_open(testing::shared_path("models/stories260K/stories260K.gguf"))).value();
    llama = std::move(Model::create(model.config, model.tensors, *backend, max_batch)).value();
    cache.emplace(std::move(KvCache::create(*backend, {model.config.n_layers, model.config.kv_dim(), 16, blocks}))
                      .value());
  }
};

#define REQUIRE_STORIES() HEARTH_REQUIRE_SHARED(testing::shared_path("models/stories260K/stories260K.gguf"))

TEST(GenerateTest, ChunkedPrefillGivesTheSameTokens) {
  REQUIRE_STORIES();
  Fixture small(32, 2), large(32, 64);
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  GenerateOptions o;
  o.spec.max_tokens = 12;
  o.spec.sampling.temperature = 0.0f;
  auto a = generate(*small.llama, *small.cache, prompt, o);
  auto b = generate(*large.llama, *large.cache, prompt, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

TEST(GenerateTest, StopsAtAStopIdAndReportsWhy) {
  REQUIRE_STORIES();
  Fixture f;
  GenerateOptions o;
  o.spec.max_tokens = 50;
  o.spec.sampling.temperature = 0.0f;
  o.spec.stop_ids = {286};  // the third greedy token
  auto r = generate(*f.llama, *f.cache, std::vector<TokenId>{1, 403, 407, 261, 378}, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->tokens, (std::vector<TokenId>{432, 383, 286}));
  EXPECT_EQ(r->finish, FinishReason::kStop);
  o.spec.ignore_stop = true;
  o.spec.max_tokens = 5;
  r = generate(*f.llama, *f.cache, std::vector<TokenId>{1, 403, 407, 261, 378}, o);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->tokens.size(), 5u);
  EXPECT_EQ(r->finish, FinishReason::kLength);
}

TEST(GenerateTest, ContextLimitEndsWithLengthAndLongPromptsAreRefused) {
  REQUIRE_STORIES();
  Fixture f(1, 4);  // one block: 16 positions
  GenerateOptions o;
  o.spec.max_tokens = 100;
  o.spec.sampling.temperature = 0.0f;
  auto r = generate(*f.llama, *f.cache, std::vector<TokenId>{1, 403, 407, 261, 378}, o);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->finish, FinishReason::kLength);
  EXPECT_EQ(r->tokens.size(), 12u);  // 5 prompt + 11 run + the last sampled one
  std::vector<TokenId> long_prompt(16, 1);
  EXPECT_EQ(generate(*f.llama, *f.cache, long_prompt, o).status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(generate(*f.llama, *f.cache, std::vector<TokenId>{}, o).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(generate(*f.llama, *f.cache, std::vector<TokenId>{1, 9999}, o).status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(f.cache->blocks_free(), 1);
}

TEST(GenerateTest, CallbackCanCancel) {
  REQUIRE_STORIES();
  Fixture f;
  GenerateOptions o;
  o.spec.max_tokens = 50;
  int calls = 0;
  auto r = generate(*f.llama, *f.cache, std::vector<TokenId>{1, 403}, o, [&](const TokenResult&) {
    return ++calls < 3;
  });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->tokens.size(), 3u);
  EXPECT_EQ(r->finish, FinishReason::kCancelled);
}

TEST(GenerateTest, SeededSamplingIsReproducible) {
  REQUIRE_STORIES();
  Fixture f;
  GenerateOptions o;
  o.spec.max_tokens = 20;
  o.spec.sampling = {.temperature = 0.9f, .top_p = 0.95f, .seed = 1234};
  const std::vector<TokenId> prompt = {1, 403, 407};
  auto a = generate(*f.llama, *f.cache, prompt, o);
  auto b = generate(*f.llama, *f.cache, prompt, o);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(a->tokens, b->tokens);
}

}  // namespace
}  // namespace hearth
