// A loaded Tokenizer is shared by all request threads: concurrent encodes must give the
// serial results.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/test_util.h"
#include "tests/unit/tokenizer/test_vectors.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

TEST(TokenizerConcurrency, ParallelEncodesMatchSerial) {
  const auto inp = testing::shared_path("tokenizers/llama3/ggml-vocab-llama-bpe.gguf.inp");
  HEARTH_REQUIRE_SHARED(inp);
  const auto texts = testing::read_inp_texts(inp);
  ASSERT_FALSE(texts.empty());
  for (const char* path : {"tokenizers/qwen3/qwen3-4b.tokenizer.json", "models/llama2-tokenizer/tokenizer.model",
                           "tokenizers/llama2-spm/phi-3.tokenizer.json"}) {
    HEARTH_REQUIRE_SHARED(testing::shared_path(path));
    auto tokenizer = testing::load_from_path(testing::shared_path(path));
    ASSERT_NE(tokenizer, nullptr);
    std::vector<std::vector<TokenId>> expected;
    for (const auto& t : texts) {
      auto ids = tokenizer->encode(t);
      ASSERT_TRUE(ids.is_ok());
      expected.push_back(*ids);
    }
    std::atomic<int> mismatches{0};
    std::vector<std::thread> threads;
    for (int th = 0; th < 4; ++th) {
      threads.emplace_back([&, th] {
        for (int round = 0; round < 20; ++round) {
          for (size_t i = 0; i < texts.size(); ++i) {
            const size_t k = (i + static_cast<size_t>(th) * 7) % texts.size();
            auto ids = tokenizer->encode(texts[k]);
            if (!ids.is_ok() || *ids != expected[k]) ++mismatches;
          }
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(mismatches.load(), 0) << path;
  }
}

}  // namespace
}  // namespace hearth
