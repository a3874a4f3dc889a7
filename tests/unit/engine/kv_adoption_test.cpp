// A restarted engine's candidates for adoption, from the tables of a real KV segment:
// only a table that is whole, for this request, and within what the request has is one;
// a candidate holds its blocks until it is entered or dropped.
#include "engine/serve/kv_adoption.h"

#include <gtest/gtest.h>

#include "ipc/segment.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

class KvAdoptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvSegmentConfig config;
    config.owner_id = 1;
    config.geometry = {.n_layers = 1, .kv_dim = 8, .block_size = 4, .n_blocks = 16, .dtype = 0, .element_bytes = 4,
                       .tp_rank = 0, .tp_size = 1, .n_slots = 2, .max_blocks = 8, .on_device = 0};
    auto segment = KvSegment::open_or_create(segment_path(dir_.path(), "unit", "kv"), config);
    ASSERT_TRUE(segment.is_ok()) << segment.status().to_string();
    resident_ = std::make_unique<ResidentKv>(std::move(segment).value());
    auto cache = KvCache::wrap({.n_layers = 1, .kv_dim = 8, .block_size = 4, .n_blocks = 16}, resident_->segment.k(),
                               resident_->segment.v());
    ASSERT_TRUE(cache.is_ok()) << cache.status().to_string();
    cache_.emplace(std::move(cache).value());
  }

  // Slot 0's table: `committed` positions in blocks 3, 5, 7, with a check at `pos`.
  void write_table(int32_t committed, int32_t pos) {
    KvSlotTable& t = resident_->segment.table(0);
    t.request_id = 7;
    t.generation = 2;
    t.blocks()[0] = 3;
    t.blocks()[1] = 5;
    t.blocks()[2] = 7;
    t.n_blocks = 3;
    t.check_logit = 1.5f;
    t.check.store(kv_check_pack(pos, 11));
    t.committed.store(committed);
  }

  static SlotRequest request(size_t n_tokens) {
    SlotRequest r;
    r.generation = 2;
    r.n_prompt = 4;
    r.tokens.assign(n_tokens, 1);
    return r;
  }

  TempDir dir_;
  std::unique_ptr<ResidentKv> resident_;
  std::optional<KvCache> cache_;
};

TEST_F(KvAdoptionTest, AWholeTableForThisRequestIsACandidateHoldingItsBlocks) {
  KvAdoption adoption(*resident_, *cache_);
  write_table(10, 9);
  SlotRequest r = request(11);
  ASSERT_TRUE(adoption.consider(0, 7, r));
  for (int32_t b : {3, 5, 7}) EXPECT_EQ(cache_->blocks().holders(b), 1) << b;
  adoption.drop();
  for (int32_t b : {3, 5, 7}) EXPECT_EQ(cache_->blocks().holders(b), 0) << b;
}

TEST_F(KvAdoptionTest, ATableThatDoesNotFitItsRequestIsNoCandidate) {
  KvAdoption adoption(*resident_, *cache_);
  struct Case {
    const char* what;
    int32_t committed, pos;
    uint64_t request_id;
    size_t n_tokens;
  };
  const Case cases[] = {
      {"nothing committed", 0, 0, 7, 11},
      {"another request", 10, 9, 8, 11},
      {"check past committed", 10, 10, 7, 11},
      {"check past the tokens", 10, 9, 7, 9},
      // Damaged: more positions committed than the request has tokens. Taking it would
      // compare tokens past the end of the request (reject_double_claims).
      {"committed past the tokens", 12, 9, 7, 11},
  };
  for (const Case& c : cases) {
    write_table(c.committed, c.pos);
    SlotRequest r = request(c.n_tokens);
    EXPECT_FALSE(adoption.consider(0, c.request_id, r)) << c.what;
    for (int32_t b : {3, 5, 7}) EXPECT_EQ(cache_->blocks().holders(b), 0) << c.what << ": block " << b;
  }
}

}  // namespace
}  // namespace hearth
