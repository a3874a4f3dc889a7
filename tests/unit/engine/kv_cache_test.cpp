#include "engine/core/kv_cache.h"
#include "engine/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <set>

namespace hearth {
namespace {

TEST(KvCacheTest, BlocksAreHandedOutOnceAndReturned) {
  auto backend = make_cpu_backend();
  auto cache = KvCache::create(*backend, {2, 8, 4, 5});
  ASSERT_TRUE(cache.is_ok());
  std::set<int32_t> taken;
  for (int i = 0; i < 5; ++i) {
    auto b = cache->block_alloc();
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(taken.insert(*b).second);
  }
  EXPECT_FALSE(cache->block_alloc().has_value());
  for (int32_t b : taken) cache->block_free(b);
  EXPECT_EQ(cache->blocks_free(), 5);
}

TEST(KvCacheTest, SequenceReserveGrowsByWholeBlocksOrNotAtAll) {
  auto backend = make_cpu_backend();
  auto cache = KvCache::create(*backend, {1, 4, 4, 3});
  ASSERT_TRUE(cache.is_ok());
  KvSequence seq;
  ASSERT_TRUE(kv_sequence_reserve(*cache, seq, 5).is_ok());
  EXPECT_EQ(seq.blocks.size(), 2u);
  EXPECT_EQ(cache->blocks_free(), 1);
  EXPECT_EQ(kv_sequence_reserve(*cache, seq, 13).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(seq.blocks.size(), 2u) << "a failed reserve takes nothing";
  ASSERT_TRUE(kv_sequence_reserve(*cache, seq, 12).is_ok());
  EXPECT_EQ(seq.slot(9, 4), seq.blocks[2] * 4 + 1);
  kv_sequence_release(*cache, seq);
  EXPECT_EQ(cache->blocks_free(), 3);
  EXPECT_TRUE(seq.blocks.empty());
}

TEST(KvCacheTest, RefusesImpossibleSizes) {
  auto backend = make_cpu_backend();
  EXPECT_FALSE(KvCache::create(*backend, {0, 4, 4, 3}).is_ok());
  EXPECT_FALSE(KvCache::create(*backend, {1 << 20, 1 << 20, 1 << 10, 1 << 20}).is_ok());
}

}  // namespace
}  // namespace hearth
