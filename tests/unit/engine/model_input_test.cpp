// ModelInput: a step's input as plain data, built for a mixed batch, sent as bytes and
// run from the copy; and its checks against malformed bytes.
#include "engine/core/model_input.h"

#include <gtest/gtest.h>

#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

// A mixed step over a cache whose blocks are handed out interleaved, so every block
// table is ragged and none is contiguous: A decodes one token after a 20-token prompt
// (2 blocks), B prefills its first 7 tokens (1 block), C prefills its second chunk of
// 10 tokens after 17 (2 blocks).
TEST(ModelInputTest, AMixedBatchRoundTripsThroughBytesAndRunsTheSameFromTheCopy) {
  const auto gguf = shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(gguf);
  auto model = model_open(gguf);
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  auto backend = make_cpu_backend();
  auto llama = Model::create(model->config, model->tensors, *backend, 64);
  ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
  auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 32});
  ASSERT_TRUE(cache.is_ok());
  ModelRunner runner(**llama, *cache);

  KvSequence a, b, c;
  for (KvSequence* s : {&a, &c, &b, &a, &c, &a}) s->blocks.push_back(*cache->block_alloc());
  a.blocks.pop_back();  // A: 2 blocks, C: 2, B: 1, in the order the allocator gave them
  std::vector<TokenId> ids(27);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(1 + (i * 37) % 500);

  // Earlier steps: A's prompt and C's first chunk.
  ModelInput earlier;
  earlier.clear(16);
  ASSERT_TRUE(earlier.add_sequence(std::span(ids).first(20), 0, a.blocks, false).is_ok());
  ASSERT_TRUE(earlier.add_sequence(std::span(ids).first(17), 0, c.blocks, false).is_ok());
  ASSERT_TRUE(runner.run(earlier).is_ok());

  ModelInput step;
  step.clear(16);
  ASSERT_TRUE(step.add_sequence(std::span(ids).subspan(20, 1), 20, a.blocks, true).is_ok());
  ASSERT_TRUE(step.add_sequence(std::span(ids).first(7), 0, b.blocks, true).is_ok());
  ASSERT_TRUE(step.add_sequence(std::span(ids).subspan(17, 10), 17, c.blocks, true).is_ok());
  EXPECT_EQ(step.query_start, (std::vector<int32_t>{0, 1, 8, 18}));
  EXPECT_EQ(step.page_start, (std::vector<int32_t>{0, 2, 3, 5}));
  EXPECT_EQ(step.logit_rows, (std::vector<int32_t>{0, 7, 17}));
  EXPECT_EQ(step.slots[0], a.blocks[1] * 16 + 4);
  EXPECT_EQ(step.slots[8], c.blocks[1] * 16 + 1);
  step.want_hidden(8, 3);  // an embedding's rows ride along
  EXPECT_EQ(step.hidden_rows, (std::vector<int32_t>{8, 9, 10}));

  std::vector<std::byte> bytes;
  step.serialize(bytes);
  ModelInput copy;
  ASSERT_TRUE(ModelInput::deserialize(bytes, copy).is_ok());
  EXPECT_EQ(copy.block_size, step.block_size);
  EXPECT_EQ(copy.tokens, step.tokens);
  EXPECT_EQ(copy.positions, step.positions);
  EXPECT_EQ(copy.slots, step.slots);
  EXPECT_EQ(copy.query_start, step.query_start);
  EXPECT_EQ(copy.page_start, step.page_start);
  EXPECT_EQ(copy.pages, step.pages);
  EXPECT_EQ(copy.logit_rows, step.logit_rows);
  EXPECT_EQ(copy.hidden_rows, step.hidden_rows);
  EXPECT_LE(bytes.size(), model_input_max_bytes(18, 3, 2));

  // The step writes only its own positions, so running it twice reads the same cache.
  auto original = runner.run(step);
  ASSERT_TRUE(original.is_ok()) << original.status().to_string();
  const std::vector<float> want(original->begin(), original->end());
  ASSERT_EQ(want.size(), 3u * 512);
  auto from_copy = runner.run(copy);
  ASSERT_TRUE(from_copy.is_ok()) << from_copy.status().to_string();
  EXPECT_EQ(std::vector<float>(from_copy->begin(), from_copy->end()), want);
}

TEST(ModelInputTest, DamagedBytesAreRefusedNeverTrusted) {
  ModelInput in;
  in.clear(16);
  const std::vector<int32_t> blocks = {3, 7};
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{1, 2, 3, 4, 5}, 14, blocks, true).is_ok());
  std::vector<std::byte> bytes;
  in.serialize(bytes);
  ModelInput out;
  for (size_t n = 0; n < bytes.size(); ++n) {  // every truncation
    EXPECT_EQ(ModelInput::deserialize(std::span(bytes).first(n), out).code(), ErrorCode::kFormat) << n;
  }
  std::vector<std::byte> longer = bytes;
  longer.push_back(std::byte{0});
  EXPECT_EQ(ModelInput::deserialize(longer, out).code(), ErrorCode::kFormat);
  std::vector<std::byte> huge = bytes;
  huge[12] = std::byte{0xff};  // the token count's low byte: more than the bytes hold
  EXPECT_EQ(ModelInput::deserialize(huge, out).code(), ErrorCode::kFormat);
  ASSERT_TRUE(ModelInput::deserialize(bytes, out).is_ok());
  const ModelInputLimits limits{512, 64, 512, 8, 16};
  EXPECT_TRUE(model_input_validate(out, limits).is_ok());
  out.hidden_rows = {4};
  EXPECT_TRUE(model_input_validate(out, limits).is_ok());
  out.hidden_rows = {5};  // past the batch
  EXPECT_FALSE(model_input_validate(out, limits).is_ok());
  out.hidden_rows.clear();
  out.pages[1] = 8;  // a block the cache does not have
  EXPECT_FALSE(model_input_validate(out, limits).is_ok());
  // Blocks that do not cover the positions are refused when the input is built.
  EXPECT_EQ(in.add_sequence(std::vector<TokenId>{1, 2, 3}, 15, std::vector<int32_t>{1}, false).code(),
            ErrorCode::kInvalidArgument);
}

// Each row carries its sequence's adapter slot (none before the first sequence that has
// one); the slots travel to other ranks, and a step is refused where a sequence's rows
// disagree or a slot is not the model's.
TEST(ModelInputTest, AdapterSlotsGoWithTheirRowsAndAreChecked) {
  ModelInput in;
  in.clear(16);
  const std::vector<int32_t> blocks = {0, 1};
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{1, 2}, 0, blocks, 1).is_ok());
  EXPECT_TRUE(in.adapters.empty()) << "no adapter so far: nothing to carry";
  EXPECT_FALSE(in.has_adapters());
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{3, 4, 5}, 0, blocks, 1, 1).is_ok());
  ASSERT_TRUE(in.add_sequence(std::vector<TokenId>{6}, 0, blocks, 1).is_ok());
  EXPECT_EQ(in.adapters, (std::vector<int32_t>{-1, -1, 1, 1, 1, -1}));
  EXPECT_TRUE(in.has_adapters());
  std::vector<std::byte> bytes;
  in.serialize(bytes);
  EXPECT_LE(bytes.size(), model_input_max_bytes(6, 3, 2));
  ModelInput copy;
  ASSERT_TRUE(ModelInput::deserialize(bytes, copy).is_ok());
  EXPECT_EQ(copy.adapters, in.adapters);
  const ModelInputLimits limits{512, 64, 512, 8, 16, 2};
  EXPECT_TRUE(model_input_validate(copy, limits).is_ok());
  EXPECT_EQ(model_input_validate(copy, {512, 64, 512, 8, 16, 1}).code(), ErrorCode::kOutOfRange);
  copy.adapters[3] = 0;  // a sequence with two adapters
  EXPECT_EQ(model_input_validate(copy, limits).code(), ErrorCode::kInvalidArgument);
  copy.adapters.pop_back();
  EXPECT_EQ(model_input_validate(copy, limits).code(), ErrorCode::kInvalidArgument);
  in.clear(16);
  EXPECT_TRUE(in.adapters.empty());
}

}  // namespace
}  // namespace hearth
