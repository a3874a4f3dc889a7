// Automatic prefix caching: the block allocator's holders, keys and eviction, the
// scheduler taking cached blocks at admission, and the driver's greedy text with the
// cache on and off, with plenty of blocks and under KV pressure.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <random>

#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/scheduler.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/model.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;

std::vector<TokenId> iota_tokens(int n, TokenId first) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + i;
  return t;
}

TEST(BlockAllocatorTest, PublishedBlocksOutliveTheirHoldersUntilEvictedLeastRecentlyUsedFirst) {
  BlockAllocator blocks(3);
  const auto t0 = iota_tokens(4, 10), t1 = iota_tokens(4, 20), t2 = iota_tokens(4, 30);
  const BlockKey k0 = block_key({}, t0), k1 = block_key(k0, t1), k2 = block_key({}, t2);
  EXPECT_FALSE(k0 == block_key({}, t1));
  EXPECT_FALSE(k1 == block_key({}, t1)) << "a key depends on what came before";
  const int32_t a = *blocks.alloc(), b = *blocks.alloc(), c = *blocks.alloc();
  EXPECT_FALSE(blocks.alloc().has_value());
  blocks.publish(a, k0, t0);
  blocks.publish(b, k1, t1);
  blocks.publish(c, k2, t2);
  EXPECT_EQ(blocks.published_count(), 3);
  // A second holder through the key; freed by both, still findable.
  EXPECT_EQ(blocks.find(k0, t0), a);
  EXPECT_EQ(blocks.holders(a), 2);
  blocks.free(a);
  blocks.free(a);
  blocks.free(c);
  blocks.free(b);  // freed in the order a, c, b: a is the least recently used
  EXPECT_EQ(blocks.free_count(), 3);
  ASSERT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
  EXPECT_EQ(blocks.find(k2, t2), c);  // found again: held, no longer evictable
  EXPECT_EQ(blocks.free_count(), 2);
  // Same key, other tokens (a collision): never trusted.
  EXPECT_FALSE(blocks.find(k0, t1).has_value());
  // Pressure evicts a first, then b; c is held.
  EXPECT_EQ(blocks.alloc(), a);
  EXPECT_FALSE(blocks.find(k0, t0).has_value()) << "an evicted block's content is forgotten";
  EXPECT_EQ(blocks.alloc(), b);
  EXPECT_FALSE(blocks.alloc().has_value());
  EXPECT_EQ(blocks.published_count(), 1);
  ASSERT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
  // A key published twice keeps its first block; the second stays private.
  blocks.publish(a, k2, t2);
  blocks.free(a);
  EXPECT_EQ(blocks.free_count(), 1);
  EXPECT_EQ(blocks.find(k2, t2), c);
  for (int32_t x : {b, c, c}) blocks.free(x);
  EXPECT_EQ(blocks.free_count(), 3);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
}

// A scheduler over fixed token lists, run as the engine would: every planned sequence
// advances, and one that samples gets token 7 appended.
struct Sequences {
  std::map<uint64_t, std::vector<TokenId>> tokens;
  TokensOf of() {
    return [this](uint64_t id) { return std::span<const TokenId>(tokens.at(id)); };
  }
  void run(Scheduler& s, const StepPlan& plan) {
    for (const PlannedSeq& p : plan.seqs) {
      s.advance(p);
      if (p.sample) tokens.at(p.id).push_back(7);
    }
  }
};

TEST(BlockAllocatorTest, HeldAndRestoredBlocksRebuildTheStateARestartFinds) {
  BlockAllocator blocks(4);
  const auto t0 = iota_tokens(4, 10), t1 = iota_tokens(4, 20);
  const BlockKey k0 = block_key({}, t0), k1 = block_key(k0, t1);
  // Block 2 held by an adopted sequence and published; block 3 published by nobody's.
  ASSERT_TRUE(blocks.hold(2));
  ASSERT_TRUE(blocks.restore(2, k0, t0));
  ASSERT_TRUE(blocks.restore(3, k1, t1));
  EXPECT_FALSE(blocks.restore(1, k1, t1)) << "a key already taken";
  EXPECT_FALSE(blocks.restore(3, k0, t0)) << "a block already published";
  EXPECT_FALSE(blocks.restore(4, k0, t0)) << "outside the cache";
  EXPECT_FALSE(blocks.hold(-1));
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
  EXPECT_EQ(blocks.holders(2), 1);
  EXPECT_EQ(blocks.free_count(), 3) << "blocks 0 and 1 free, 3 evictable";
  EXPECT_EQ(blocks.find(k1, t1), std::optional<int32_t>(3));
  EXPECT_EQ(blocks.find(k0, t0), std::optional<int32_t>(2));
  EXPECT_EQ(blocks.holders(2), 2);
  ASSERT_TRUE(blocks.hold(2)) << "held again: shared by a third";
  EXPECT_EQ(blocks.holders(2), 3);
  for (int i = 0; i < 3; ++i) blocks.free(2);
  blocks.free(3);
  EXPECT_EQ(blocks.free_count(), 4);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
}

TEST(SchedulerPrefixTest, AnAdoptedSequenceGoesFirstSoThatTheBlocksItHoldsCannotStallTheQueue) {
  BlockAllocator blocks(8);
  Sequences seqs;
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64}, blocks, 4, seqs.of());
  // A newcomer that needs 5 blocks arrives first; then a restart adopts a sequence that
  // holds 6 of the 8 (23 positions computed, one to go).
  seqs.tokens[1] = iota_tokens(20, 100);
  ASSERT_TRUE(s.add(1, 20).is_ok());
  seqs.tokens[2] = iota_tokens(24, 300);
  KvSequence kv;
  for (int32_t b = 0; b < 6; ++b) {
    ASSERT_TRUE(blocks.hold(b));
    kv.blocks.push_back(b);
  }
  kv.length = 23;
  ASSERT_TRUE(s.add(2, 24, kv).is_ok());
  EXPECT_TRUE(kv.blocks.empty()) << "taken";
  // Behind the newcomer it would wait forever: the newcomer cannot get its blocks, and
  // nothing runs to give any back. First in line, it runs its one position.
  StepPlan p = s.plan();
  ASSERT_FALSE(p.seqs.empty());
  EXPECT_EQ(p.seqs[0].id, 2u);
  EXPECT_EQ(p.seqs[0].begin, 23);
  EXPECT_EQ(p.seqs[0].count, 1);
  seqs.run(s, p);
  s.remove(2);
  p = s.plan();
  ASSERT_FALSE(p.seqs.empty());
  EXPECT_EQ(p.seqs[0].id, 1u);
  seqs.run(s, p);
  s.remove(1);
  EXPECT_EQ(blocks.free_count(), 8);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
}

TEST(SchedulerPrefixTest, AdmissionTakesTheCachedFullBlocksButNeverTheLastTokensBlock) {
  BlockAllocator blocks(32);
  Sequences seqs;
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64}, blocks, 4, seqs.of());
  seqs.tokens[1] = iota_tokens(10, 100);
  ASSERT_TRUE(s.add(1, 10).is_ok());
  seqs.run(s, s.plan());  // 10 positions: blocks 0 and 1 full and published
  EXPECT_EQ(s.cached_tokens(1), 0);
  EXPECT_EQ(blocks.published_count(), 2);
  // The same first 9 tokens: two full blocks found, computing starts at 8.
  seqs.tokens[2] = iota_tokens(9, 100);
  seqs.tokens[2].push_back(5);
  ASSERT_TRUE(s.add(2, 10).is_ok());
  StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].id, 2u);
  EXPECT_EQ(p.seqs[1].begin, 8);
  EXPECT_EQ(p.seqs[1].count, 2);
  EXPECT_EQ(s.cached_tokens(2), 8);
  EXPECT_EQ(s.kv(2)->blocks[0], s.kv(1)->blocks[0]);
  EXPECT_EQ(s.kv(2)->blocks[1], s.kv(1)->blocks[1]);
  EXPECT_EQ(blocks.holders(s.kv(1)->blocks[0]), 2);
  seqs.run(s, p);
  // Exactly 8 known tokens, both blocks cached: the second is computed again, in a block
  // of its own, for the last token's logits.
  seqs.tokens[3] = iota_tokens(8, 100);
  ASSERT_TRUE(s.add(3, 8).is_ok());
  p = s.plan();
  ASSERT_EQ(p.seqs.back().id, 3u);
  EXPECT_EQ(p.seqs.back().begin, 4);
  EXPECT_EQ(p.seqs.back().count, 4);
  EXPECT_NE(s.kv(3)->blocks[1], s.kv(1)->blocks[1]);
  // Different from the first token on: nothing found.
  seqs.tokens[4] = iota_tokens(12, 300);
  ASSERT_TRUE(s.add(4, 12).is_ok());
  seqs.run(s, p);
  p = s.plan();
  EXPECT_EQ(p.seqs.back().id, 4u);
  EXPECT_EQ(p.seqs.back().begin, 0);
  EXPECT_EQ(s.prefix_queries(), 10u + 10u + 8u + 12u);
  EXPECT_EQ(s.prefix_hits(), 8u + 4u);
  seqs.run(s, p);
  for (uint64_t id = 1; id <= 4; ++id) s.remove(id);
  EXPECT_EQ(blocks.free_count(), 32);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
}

TEST(SchedulerPrefixTest, OffItFindsNothing) {
  BlockAllocator blocks(32);
  Sequences seqs;
  Scheduler s({.max_batched_tokens = 64, .prefix_caching = false}, blocks, 4, seqs.of());
  seqs.tokens[1] = iota_tokens(10, 100);
  seqs.tokens[2] = iota_tokens(10, 100);
  ASSERT_TRUE(s.add(1, 10).is_ok());
  seqs.run(s, s.plan());
  ASSERT_TRUE(s.add(2, 10).is_ok());
  const StepPlan p = s.plan();
  EXPECT_EQ(p.seqs.back().begin, 0);
  EXPECT_EQ(blocks.published_count(), 0);
  EXPECT_EQ(s.prefix_queries(), 0u);
}

TEST(SchedulerPrefixTest, PreemptedSequencesComeBackThroughTheirOwnPublishedBlocks) {
  BlockAllocator blocks(6);
  Sequences seqs;
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 64}, blocks, 4, seqs.of());
  seqs.tokens[1] = iota_tokens(9, 100);
  seqs.tokens[2] = iota_tokens(9, 200);
  ASSERT_TRUE(s.add(1, 9).is_ok());
  ASSERT_TRUE(s.add(2, 9).is_ok());
  seqs.run(s, s.plan());  // 3 blocks each: the cache is full
  StepPlan p = s.plan();  // 1 needs no new block (position 9 is in its third block)
  seqs.run(s, p);
  // Decoding on, someone must give way: 2 is preempted, its full blocks stay published.
  int preempted_at = -1;
  for (int step = 0; step < 8 && preempted_at < 0; ++step) {
    p = s.plan();
    if (!p.preempted.empty()) preempted_at = step;
    seqs.run(s, p);
  }
  ASSERT_GE(preempted_at, 0);
  EXPECT_GE(s.preemptions(), 1u);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
  s.remove(1);  // room again: 2 comes back and finds what it computed before
  p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 2u);
  EXPECT_GE(p.seqs[0].begin, 8);
  EXPECT_TRUE(blocks.audit().is_ok()) << blocks.audit().to_string();
}

#define REQUIRE_STORIES() HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/stories260K.gguf"))

// 64 requests over four shared prefixes (40 to 150 tokens) with their own questions,
// all queued at once: every greedy text the same with the cache on and off, with room
// for all and with a cache small enough to preempt and evict.
TEST(DriverPrefixTest, GreedyTextIsTheSameWithTheCacheOnAndOffAndUnderPressure) {
  REQUIRE_STORIES();
  LoadedModel model = std::move(model_open(shared_path("models/stories260K/stories260K.gguf"))).value();
  auto backend = make_cpu_backend();
  auto llama = std::move(Model::create(model.config, model.tensors, *backend, 256)).value();
  std::mt19937 rng(5);
  std::uniform_int_distribution<TokenId> token(3, model.config.vocab_size - 1);
  std::vector<std::vector<TokenId>> prefixes;
  for (int n : {40, 75, 100, 150}) {
    prefixes.emplace_back(1, 1);
    for (int i = 0; i < n; ++i) prefixes.back().push_back(token(rng));
  }
  std::vector<std::vector<TokenId>> prompts;
  for (int r = 0; r < 64; ++r) {
    prompts.push_back(prefixes[static_cast<size_t>(r % 4)]);
    const int question = 3 + r % 17;
    for (int i = 0; i < question; ++i) prompts.back().push_back(token(rng));
  }
  struct Run {
    std::vector<std::vector<TokenId>> texts;
    uint64_t hits = 0, preemptions = 0;
  };
  auto run = [&](int32_t n_blocks, bool prefix_caching) {
    KvCache cache = std::move(KvCache::create(*backend, {model.config.n_layers, model.config.kv_dim(), 16, n_blocks})).value();
    ModelRunner runner(*llama, cache);
    Run out;
    out.texts.resize(prompts.size());
    {
      Driver driver(runner, {.scheduler = {.max_batch_size = 16, .max_batched_tokens = 256, .prefix_caching = prefix_caching},
                             .max_sequence_tokens = 512});
      for (size_t r = 0; r < prompts.size(); ++r) {
        const auto n = static_cast<int32_t>(prompts[r].size());
        EXPECT_TRUE(driver.add(r, {.tokens = prompts[r], .n_prompt = n, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 24, .ignore_stop = true}})
                        .is_ok());
      }
      EXPECT_TRUE(driver
                      .run_until_idle([&](const StepEvent& e) {
                        EXPECT_TRUE(e.error.is_ok()) << e.error.to_string();
                        out.texts[e.id].push_back(e.token.id);
                        return true;
                      })
                      .is_ok());
      out.hits = driver.scheduler().prefix_hits();
      out.preemptions = driver.scheduler().preemptions();
    }
    EXPECT_EQ(cache.blocks_free(), n_blocks) << "every block back";
    EXPECT_TRUE(cache.blocks().audit().is_ok()) << cache.blocks().audit().to_string();
    return out;
  };
  const Run off = run(1024, false), on = run(1024, true), tight = run(48, true);
  EXPECT_EQ(off.hits, 0u);
  EXPECT_GT(on.hits, 64u * 40u / 2) << "most requests find their prefix";
  EXPECT_GT(tight.preemptions, 0u) << "the small cache must be under pressure for this test to mean anything";
  std::printf("prefix tokens found: %llu of the room-for-all run, %llu under pressure (%llu preemptions)\n",
              static_cast<unsigned long long>(on.hits), static_cast<unsigned long long>(tight.hits),
              static_cast<unsigned long long>(tight.preemptions));
  for (size_t r = 0; r < prompts.size(); ++r) {
    ASSERT_EQ(off.texts[r].size(), 24u);
    EXPECT_EQ(on.texts[r], off.texts[r]) << "request " << r;
    EXPECT_EQ(tight.texts[r], off.texts[r]) << "request " << r << " under pressure";
  }
}

// The journal a resident KV cache keeps, in memory: what each sequence committed.
struct RecordingJournal final : KvJournal {
  struct Entry {
    std::vector<int32_t> blocks;
    int32_t length = 0;
    std::optional<RowCheck> check;
  };
  std::map<uint64_t, Entry> live;
  int released_calls = 0;
  void released(uint64_t id) override {
    ++released_calls;
    live.erase(id);
  }
  void committed(uint64_t id, const KvSequence& kv, const RowCheck* check) override {
    Entry& e = live[id];
    e.blocks = kv.blocks;
    e.length = kv.length;
    if (check != nullptr) {
      EXPECT_EQ(check->pos, kv.length - 1);
      e.check = *check;
    }
  }
};

TEST(KvAdoptTest, ADriverContinuesFromAdoptedBlocksWithTheTokensOfAnUninterruptedRun) {
  REQUIRE_STORIES();
  LoadedModel model = std::move(model_open(shared_path("models/stories260K/stories260K.gguf"))).value();
  auto backend = make_cpu_backend();
  auto llama = std::move(Model::create(model.config, model.tensors, *backend, 256)).value();
  std::mt19937 rng(9);
  std::uniform_int_distribution<TokenId> token(3, model.config.vocab_size - 1);
  std::vector<std::vector<TokenId>> prompts(8);
  for (size_t r = 0; r < prompts.size(); ++r) {
    prompts[r].push_back(1);
    for (size_t i = 0; i < 20 + 9 * r; ++i) prompts[r].push_back(token(rng));
  }
  constexpr int32_t kOut = 40, kBlocks = 256;
  KvCache cache = std::move(KvCache::create(*backend, {model.config.n_layers, model.config.kv_dim(), 16, kBlocks})).value();
  ModelRunner runner(*llama, cache);
  const DriverConfig base{.scheduler = {.max_batch_size = 8, .max_batched_tokens = 64}, .max_sequence_tokens = 512};
  auto request = [&](size_t r, const std::vector<TokenId>& produced) {
    SequenceRequest q{.tokens = prompts[r], .n_prompt = static_cast<int32_t>(prompts[r].size()), .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = kOut, .ignore_stop = true}};
    q.tokens.insert(q.tokens.end(), produced.begin(), produced.end());
    return q;
  };
  std::vector<std::vector<TokenId>> reference(prompts.size());
  {
    Driver d(runner, base);
    for (size_t r = 0; r < prompts.size(); ++r) ASSERT_TRUE(d.add(r, request(r, {})).is_ok());
    ASSERT_TRUE(d.run_until_idle([&](const StepEvent& e) {
                   reference[e.id].push_back(e.token.id);
                   return true;
                 }).is_ok());
  }
  // The same run, journaled, stopped after 12 steps as a crash would stop it: the driver
  // is gone without releasing anything.
  RecordingJournal journal;
  std::vector<std::vector<TokenId>> produced(prompts.size());
  {
    DriverConfig c = base;
    c.journal = &journal;
    Driver d(runner, c);
    for (size_t r = 0; r < prompts.size(); ++r) ASSERT_TRUE(d.add(r, request(r, {})).is_ok());
    std::vector<StepEvent> events;
    for (int step = 0; step < 12; ++step) {
      bool ran = false;
      ASSERT_TRUE(d.step(events, ran).is_ok());
      for (const StepEvent& e : events) produced[e.id].push_back(e.token.id);
    }
  }
  ASSERT_EQ(journal.live.size(), prompts.size()) << "every sequence committed and none released";
  // The restart: the allocator is rebuilt from the journal alone, each sequence adopts
  // its blocks and continues from its committed length.
  cache.blocks() = BlockAllocator(kBlocks);
  Driver d(runner, base);
  std::vector<int32_t> adopted_length(prompts.size());
  for (size_t r = 0; r < prompts.size(); ++r) {
    const RecordingJournal::Entry& e = journal.live.at(r);
    ASSERT_TRUE(e.check.has_value()) << "decoding sequences sampled a row";
    EXPECT_EQ(e.check->token, produced[r].back()) << "greedy: the check's top token is the token produced";
    KvSequence kv;
    const auto n_tokens = static_cast<int32_t>(prompts[r].size() + produced[r].size());
    kv.length = std::min(e.length, n_tokens - 1);
    for (size_t b = 0; b < static_cast<size_t>((kv.length + 15) / 16); ++b) {
      ASSERT_TRUE(cache.blocks().hold(e.blocks[b]));
      kv.blocks.push_back(e.blocks[b]);
    }
    adopted_length[r] = kv.length;
    ASSERT_TRUE(d.add(r, request(r, produced[r]), std::move(kv)).is_ok());
  }
  EXPECT_FALSE(cache.blocks().hold(kBlocks)) << "a block outside the cache";
  // The first step computes one position per sequence: nothing committed is computed again.
  std::vector<StepEvent> events;
  bool ran = false;
  ASSERT_TRUE(d.step(events, ran).is_ok());
  EXPECT_EQ(d.last_step_tokens(), static_cast<int32_t>(prompts.size()));
  for (const StepEvent& e : events) produced[e.id].push_back(e.token.id);
  ASSERT_TRUE(d.run_until_idle([&](const StepEvent& e) {
                 produced[e.id].push_back(e.token.id);
                 return true;
               }).is_ok());
  for (size_t r = 0; r < prompts.size(); ++r) {
    EXPECT_EQ(produced[r], reference[r]) << "sequence " << r;
  }
  EXPECT_EQ(cache.blocks_free(), kBlocks) << "every adopted block back";
  EXPECT_TRUE(cache.blocks().audit().is_ok()) << cache.blocks().audit().to_string();
}

}  // namespace
}  // namespace hearth
