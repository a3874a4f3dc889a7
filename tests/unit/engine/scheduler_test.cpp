// The scheduler alone: no model, just its plans.
#include "engine/core/scheduler.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

// Runs a plan as the engine would: every planned sequence advances.
void run(Scheduler& s, const StepPlan& plan) {
  for (const PlannedSeq& p : plan.seqs) s.advance(p);
}

TEST(SchedulerTest, ChunkedPrefillThenDecode) {
  BlockAllocator blocks(64);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 8}, blocks, 4);
  ASSERT_TRUE(s.add(1, 20).is_ok());
  std::vector<std::pair<int, int>> chunks;
  for (int step = 0; step < 3; ++step) {
    const StepPlan p = s.plan();
    ASSERT_EQ(p.seqs.size(), 1u);
    chunks.emplace_back(p.seqs[0].begin, p.seqs[0].count);
    EXPECT_EQ(p.seqs[0].sample, step == 2);
    run(s, p);
  }
  EXPECT_EQ(chunks, (std::vector<std::pair<int, int>>{{0, 8}, {8, 8}, {16, 4}}));
  const StepPlan d = s.plan();
  ASSERT_EQ(d.seqs.size(), 1u);
  EXPECT_EQ(d.seqs[0].begin, 20);
  EXPECT_EQ(d.seqs[0].count, 1);
  EXPECT_TRUE(d.seqs[0].sample);
  EXPECT_EQ(s.kv(1)->blocks.size(), 6u);  // 21 positions in blocks of 4
}

TEST(SchedulerTest, DecodesFirstThenFillsTheBudgetWithNewPrompts) {
  BlockAllocator blocks(64);
  Scheduler s({.max_batch_size = 8, .max_batched_tokens = 8}, blocks, 4);
  ASSERT_TRUE(s.add(1, 3).is_ok());
  run(s, s.plan());  // 1 prefilled
  ASSERT_TRUE(s.add(2, 10).is_ok());
  ASSERT_TRUE(s.add(3, 2).is_ok());
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_EQ(p.seqs[0].count, 1);
  EXPECT_EQ(p.seqs[1].id, 2u);
  EXPECT_EQ(p.seqs[1].count, 7);  // the rest of the budget; 3 waits its turn
  EXPECT_FALSE(p.seqs[1].sample);
  EXPECT_EQ(p.tokens, 8);
  EXPECT_EQ(s.n_waiting(), 1);
}

TEST(SchedulerTest, BatchSizeBoundsTheStep) {
  BlockAllocator blocks(64);
  Scheduler s({.max_batch_size = 2, .max_batched_tokens = 100}, blocks, 4);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_TRUE(s.add(id, 2).is_ok());
  const StepPlan p = s.plan();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(s.n_waiting(), 1);
}

TEST(SchedulerTest, PreemptsTheNewestWhenBlocksRunOutAndRecomputesIt) {
  BlockAllocator blocks(4);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64}, blocks, 4);
  ASSERT_TRUE(s.add(1, 8).is_ok());
  ASSERT_TRUE(s.add(2, 8).is_ok());
  run(s, s.plan());  // both prefilled: 4 blocks used, each knows 9 tokens now
  EXPECT_EQ(blocks.free_count(), 0);
  const StepPlan p = s.plan();  // 1 needs a 3rd block for position 8: 2 gives way
  EXPECT_EQ(p.preempted, std::vector<uint64_t>{2});
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_EQ(p.seqs[0].begin, 8);
  EXPECT_EQ(s.n_waiting(), 1);
  run(s, p);
  s.remove(1);  // finished: its blocks come back
  const StepPlan again = s.plan();
  ASSERT_EQ(again.seqs.size(), 1u);
  EXPECT_EQ(again.seqs[0].id, 2u);
  EXPECT_EQ(again.seqs[0].begin, 0) << "recomputed from its first token";
  EXPECT_EQ(again.seqs[0].count, 9) << "prompt plus the token it had produced";
  EXPECT_TRUE(again.seqs[0].sample);
}

TEST(SchedulerTest, SequencesLongerThanTheCacheAreReported) {
  BlockAllocator blocks(4);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64}, blocks, 4);
  ASSERT_TRUE(s.add(7, 17).is_ok());  // 5 blocks of 4 > 4
  ASSERT_TRUE(s.add(8, 3).is_ok());
  const StepPlan p = s.plan();
  EXPECT_EQ(p.unschedulable, std::vector<uint64_t>{7});
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 8u);
  EXPECT_FALSE(s.contains(7));
}

TEST(SchedulerTest, RemoveFreesBlocksAndTheQueueIsBounded) {
  BlockAllocator blocks(8);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64, .max_waiting = 2}, blocks, 4);
  ASSERT_TRUE(s.add(1, 9).is_ok());
  run(s, s.plan());
  EXPECT_EQ(s.blocks_used(), 3);
  s.remove(1);
  EXPECT_EQ(s.blocks_used(), 0);
  ASSERT_TRUE(s.add(2, 1).is_ok());
  ASSERT_TRUE(s.add(3, 1).is_ok());
  EXPECT_EQ(s.add(4, 1).code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(s.add(2, 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(s.plan().seqs.size() == 2u);
}

}  // namespace
}  // namespace hearth

namespace hearth {
namespace {

TEST(SchedulerTest, StaticBatchingWaitsForAFullBatchOrItsTimeout) {
  BlockAllocator blocks(64);
  Scheduler s({.max_batch_size = 3, .max_batched_tokens = 64, .static_batch_timeout_ms = 100}, blocks, 4);
  s.plan(0);
  ASSERT_TRUE(s.add(1, 2).is_ok());
  EXPECT_TRUE(s.plan(50).seqs.empty()) << "not full, not timed out";
  ASSERT_TRUE(s.add(2, 2).is_ok());
  ASSERT_TRUE(s.add(3, 2).is_ok());
  StepPlan full = s.plan(60);
  EXPECT_EQ(full.seqs.size(), 3u) << "a full batch starts at once";
  for (const auto& p : full.seqs) s.advance(p);
  ASSERT_TRUE(s.add(4, 2).is_ok());
  const StepPlan next = s.plan(500);
  EXPECT_EQ(next.seqs.size(), 3u) << "the running batch continues; 4 waits for it to end";
  for (uint64_t id : {1, 2, 3}) s.remove(id);
  EXPECT_EQ(s.plan(501).seqs.size(), 1u) << "after the batch, the timed-out newcomer runs";
}

}  // namespace
}  // namespace hearth
