// Speculative decoding: the n-gram proposer, the draft-length rule, the scheduler's
// rollback of rejected drafts, and the driver's output, which must be plain decoding's.
#include "engine/core/speculation.h"

#include <cmath>
#include <cstdio>
#include <map>

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "engine/core/draft_proposer.h"
#include "engine/core/driver.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/core/generate.h"
#include "engine/core/scheduler.h"
#include "grammar/json_schema.h"
#include "loader/model.h"
#include "tests/test_util.h"
#include "tests/unit/engine/stories_model.h"
#include "tokenizer/tokenizer.h"

namespace hearth {
namespace {

using testing::shared_path;
namespace json = boost::json;

std::vector<TokenId> propose(std::vector<TokenId> tokens, int32_t k, int32_t n_min = 2, int32_t n_max = 4) {
  std::vector<TokenId> out;
  ngram_propose(tokens, n_min, n_max, k, out);
  return out;
}

TEST(NgramProposeTest, ProposesWhatFollowedTheLongestLatestMatch) {
  // "7 8" occurred twice before; "6 7 8" only once: the longer match wins.
  EXPECT_EQ(propose({6, 7, 8, 1, 2, 3, 9, 7, 8, 4, 5, 0, 6, 7, 8}, 3), (std::vector<TokenId>{1, 2, 3}));
  // Equal lengths: the latest place.
  EXPECT_EQ(propose({7, 8, 1, 2, 7, 8, 3, 4, 7, 8}, 2), (std::vector<TokenId>{3, 4}));
  // Nothing of ngram_min tokens occurred before: nothing.
  EXPECT_TRUE(propose({1, 2, 3, 4, 5, 3}, 4).empty());
  EXPECT_EQ(propose({1, 2, 3, 4, 5, 3}, 2, 1, 4), (std::vector<TokenId>{4, 5}));
  // Where what followed runs into the end, the text repeats with its period.
  EXPECT_EQ(propose({5, 1, 2, 3, 1, 2, 3}, 5), (std::vector<TokenId>{1, 2, 3, 1, 2}));
  EXPECT_EQ(propose({9, 9, 9}, 3), (std::vector<TokenId>{9, 9, 9}));
  // Too short to match, or nothing asked.
  EXPECT_TRUE(propose({4}, 3, 1).empty());
  EXPECT_TRUE(propose({1, 2, 1, 2}, 0).empty());
}

TEST(SpecDraftLengthTest, FollowsAcceptanceAndCostAndProbesAfterAPause) {
  SpecState s;
  EXPECT_NEAR(s.accept(), 0.5, 1e-9);
  for (int i = 0; i < 30; ++i) s.observe(4, 4);  // every draft kept
  EXPECT_GT(s.accept(), 0.9);
  EXPECT_EQ(spec_draft_length(s, 4, 0.1), 4);
  EXPECT_EQ(spec_draft_length(s, 4, 0.999), 0);  // nothing beats a threshold that high
  SpecState bad;
  for (int i = 0; i < 30; ++i) bad.observe(4, 0);  // every draft rejected at once
  EXPECT_LT(bad.accept(), 0.15);
  int drafted = 0;
  for (int step = 0; step < 32; ++step) drafted += spec_draft_length(bad, 4, 0.2);
  EXPECT_EQ(drafted, 2);  // one probe per 16 decoding steps
  // With a costly proposer, probes that fail wait twice as long each time, up to 256
  // steps; one that succeeds brings the wait back to 16.
  std::vector<int> probes;
  for (int step = 1; step <= 1200; ++step) {
    const int32_t k = spec_draft_length(bad, 4, 0.2, /*back_off=*/true);
    if (k == 0) continue;
    probes.push_back(step);
    bad.observe(k, 0);
  }
  EXPECT_EQ(probes, (std::vector<int>{16, 48, 112, 240, 496, 752, 1008}));
  SpecState recovering = bad;
  for (int step = 0; step < 255 && spec_draft_length(recovering, 4, 0.2, true) == 0; ++step) {
  }
  recovering.observe(1, 1);  // the probe was kept
  EXPECT_EQ(recovering.probe_after, 16);
  // A free proposer (prompt lookup) probes every 16 steps however its probes fared.
  drafted = 0;
  for (int step = 0; step < 64; ++step) drafted += spec_draft_length(bad, 4, 0.2);
  EXPECT_EQ(drafted, 4);

  // Cheap drafts (the fixed cost dominates) for one stream, dear ones in a large batch.
  const StepFit fit{.fixed_ns = 50000.0, .per_token_ns = 1000.0};
  EXPECT_LT(spec_threshold(fit, 1, 1), 0.02);
  EXPECT_GT(spec_threshold(fit, 64, 64), 0.5);
  EXPECT_NEAR(spec_threshold(std::nullopt, 1, 1), 0.1, 1e-9);
  // A draft model's token costs a fifth of the target's fixed cost: a token must be far
  // likelier to pay for that too (1 * (1000 + 10000) / 51000).
  EXPECT_NEAR(spec_threshold(fit, 1, 1, 10000.0), 11.0 / 51.0, 1e-9);
  EXPECT_NEAR(spec_threshold(std::nullopt, 1, 1, 10000.0), 0.25, 1e-9);
}

TEST(StepCostTest, FitsTheFixedAndPerTokenCost) {
  StepCost cost;
  EXPECT_FALSE(cost.fit().has_value());
  for (int i = 0; i < 20; ++i) cost.observe(1, 5000);
  EXPECT_FALSE(cost.fit().has_value());  // every step the same size: nothing to tell apart
  for (int i = 0; i < 40; ++i) {
    const int n = 1 + i % 5;
    cost.observe(n, static_cast<uint64_t>(4000 + 1000 * n));
  }
  ASSERT_TRUE(cost.fit().has_value());
  EXPECT_NEAR(cost.fit()->fixed_ns, 4000.0, 50.0);
  EXPECT_NEAR(cost.fit()->per_token_ns, 1000.0, 10.0);
  for (int i = 0; i < 200; ++i) cost.observe(1, 5000);  // drafting stopped: the last fit stands
  ASSERT_TRUE(cost.fit().has_value());
  EXPECT_NEAR(cost.fit()->fixed_ns, 4000.0, 50.0);
}

TEST(SpecSchedulerTest, RejectedDraftsAreRolledBackAndTheirBlocksFreed) {
  BlockAllocator blocks(8);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 16}, blocks, 4);
  int32_t drafts = 0;
  s.set_drafts([&](uint64_t, int32_t room) { return std::min(drafts, room); });
  ASSERT_TRUE(s.add(1, 7).is_ok());
  StepPlan p = s.plan();  // prefill: no drafts
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].draft, 0);
  s.advance(p.seqs[0]);  // 7 computed, 8 known
  drafts = 5;
  p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].begin, 7);
  EXPECT_EQ(p.seqs[0].count, 6);  // the known token and 5 drafts: positions 7..12
  EXPECT_EQ(p.seqs[0].draft, 5);
  EXPECT_EQ(p.tokens, 6);
  EXPECT_EQ(s.kv(1)->blocks.size(), 4u);
  s.advance(p.seqs[0], 1);  // one draft kept: positions 7 and 8 hold the sequence, 10 tokens known
  EXPECT_EQ(s.kv(1)->length, 9);
  EXPECT_EQ(s.kv(1)->blocks.size(), 3u);  // the block of positions 12.. held only rejected drafts
  EXPECT_EQ(blocks.free_count(), 5);
  drafts = 0;
  p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].begin, 9);
  EXPECT_EQ(p.seqs[0].count, 1);
  // Drafts never preempt: with too few blocks free, the sequence decodes plainly.
  s.advance(p.seqs[0]);
  ASSERT_TRUE(s.add(2, 20).is_ok());  // takes 4 of the 5 free blocks
  p = s.plan();
  for (const PlannedSeq& q : p.seqs) s.advance(q);
  drafts = 8;
  p = s.plan();
  ASSERT_FALSE(p.seqs.empty());
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_EQ(p.seqs[0].draft, 0);
  EXPECT_TRUE(p.preempted.empty());
}

// Drafts take only blocks the running sequences after them do not need: with two free
// blocks, which the first two sequences' next tokens take, the first drafts nothing and
// nobody is preempted.
TEST(SpecSchedulerTest, DraftsNeverCauseAPreemption) {
  BlockAllocator blocks(8);
  Scheduler s({.max_batch_size = 4, .max_batched_tokens = 32}, blocks, 4);
  s.set_drafts([](uint64_t id, int32_t room) { return id == 1 ? std::min(5, room) : 0; });
  ASSERT_TRUE(s.add(1, 4).is_ok());
  ASSERT_TRUE(s.add(2, 4).is_ok());
  ASSERT_TRUE(s.add(3, 15).is_ok());
  StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 3u);
  for (const PlannedSeq& q : p.seqs) s.advance(q);
  EXPECT_EQ(blocks.free_count(), 2);  // 1 and 2 need one more block for their next tokens, 3 does not
  p = s.plan();
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[0].draft, 0);
  EXPECT_TRUE(p.preempted.empty());
  EXPECT_EQ(s.preemptions(), 0u);
}

// Drafts come out of what the step has left once every sequence has its own tokens: four
// decoding sequences that would each draft 16 all run, and the first drafts the rest.
TEST(SpecSchedulerTest, DraftsNeverKeepASequenceOutOfAStep) {
  BlockAllocator blocks(64);
  Scheduler s({.max_batch_size = 8, .max_batched_tokens = 8}, blocks, 4);
  s.set_drafts([](uint64_t, int32_t room) { return std::min(16, room); });
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(s.add(id, 2).is_ok());
  StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 4u);
  for (const PlannedSeq& q : p.seqs) s.advance(q);
  p = s.plan();
  ASSERT_EQ(p.seqs.size(), 4u);
  EXPECT_EQ(p.seqs[0].draft, 4);
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(p.seqs[i].count, 1);
  EXPECT_EQ(p.tokens, 8);
}

#define REQUIRE_STORIES() HEARTH_REQUIRE_SHARED(shared_path("models/stories260K/stories260K.gguf"))

struct Stories : testing::StoriesModel {
  Stories() : StoriesModel(128, 320) {}

  // The draft model kDraft drafts with: stories260K's first `layers` layers (all five: the
  // target itself, whose drafts are all kept), over a cache of its own.
  void use_draft(int32_t layers) {
    draft_runner.reset();
    draft_llama.reset();
    ModelConfig c = model.config;
    c.n_layers = layers;
    std::vector<TensorView> tensors;
    for (const TensorView& t : model.tensors) {
      int layer = -1;
      if (std::sscanf(t.name.c_str(), "blk.%d.", &layer) == 1 && layer >= layers) continue;
      tensors.push_back(t);
    }
    draft_llama = std::move(Model::create(c, tensors, *backend, 128)).value();
    draft_cache.emplace(std::move(KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 320})).value());
    draft_runner = std::make_unique<ModelRunner>(*draft_llama, *draft_cache);
  }

  DriverConfig config(SpecMethod method, int32_t spec_tokens = 4, bool adaptive = true) {
    DriverConfig c{.scheduler = {.max_batch_size = 16, .max_batched_tokens = 128}, .max_sequence_tokens = 512};
    c.vocabulary = [v = vocab]() -> Result<std::shared_ptr<const grammar::Vocabulary>> { return v; };
    c.spec = {.method = method, .max_tokens = spec_tokens, .adaptive = adaptive};
    c.draft = draft_runner.get();
    return c;
  }

  std::unique_ptr<Model> draft_llama;
  std::optional<KvCache> draft_cache;
  std::unique_ptr<ModelRunner> draft_runner;

  // Runs the requests together to their ends; the tokens by id.
  std::map<uint64_t, std::vector<TokenId>> run(const DriverConfig& config, const std::vector<SequenceRequest>& requests,
                                               SpecStats* stats = nullptr) {
    Driver driver(*runner, config);
    for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(*driver.add(i, requests[i]), FinishReason::kNone);
    std::map<uint64_t, std::vector<TokenId>> out;
    drain(driver, config, out);
    if (stats != nullptr) *stats = driver.spec_stats();
    return out;
  }
  // Runs the driver's sequences to their ends, each token after its sequence's earlier
  // ones in `out`; then every finished sequence's KV (and draft KV) is let go.
  void drain(Driver& driver, const DriverConfig& config, std::map<uint64_t, std::vector<TokenId>>& out) {
    const Status st = driver.run_until_idle([&](const StepEvent& e) {
      EXPECT_NE(e.finish, FinishReason::kError) << e.error.to_string();
      out[e.id].push_back(e.token.id);
      EXPECT_EQ(static_cast<size_t>(e.n_produced), out[e.id].size());
      return true;
    });
    EXPECT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(cache->blocks_free(), cache->config().n_blocks);  // the prefix cache's blocks count as free
    if (draft_cache && config.spec.method == SpecMethod::kDraft) {
      EXPECT_EQ(draft_cache->blocks_free(), draft_cache->config().n_blocks);
    }
  }
  std::vector<TokenId> prompt(std::string_view text) { return std::move(tokenizer->encode(text)).value(); }
};

// Greedy: the stories260K ground truth, token for token, with drafts kept along the way.
TEST(SpecDriverTest, GreedyOutputIsPlainDecodingsWithTheGroundTruth) {
  REQUIRE_STORIES();
  Stories f;
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  for (int32_t k : {1, 4, 16}) {
    GenerateOptions plain;
    plain.spec.max_tokens = 200;
    plain.spec.sampling.temperature = 0.0f;
    GenerateOptions spec = plain;
    spec.speculative = {.method = SpecMethod::kNgram, .max_tokens = k};
    const auto want = generate(*f.llama, *f.cache, prompt, plain);
    const auto got = generate(*f.llama, *f.cache, prompt, spec);
    ASSERT_TRUE(want.is_ok() && got.is_ok());
    ASSERT_EQ(want->tokens.size(), 200u);
    EXPECT_EQ(std::vector<TokenId>(want->tokens.begin(), want->tokens.begin() + 16),
              (std::vector<TokenId>{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}));
    EXPECT_EQ(got->tokens, want->tokens) << "spec tokens " << k;
    EXPECT_EQ(got->logprobs, want->logprobs);
    EXPECT_GT(got->spec.drafts, 0u);
    EXPECT_GT(got->spec.accepted, 0u) << "spec tokens " << k;
    EXPECT_LE(got->spec.accepted, got->spec.draft_tokens);
    EXPECT_EQ(got->spec.accepted_at[0] >= got->spec.accepted_at[1], true);
  }
}

// A draft model: the target itself (every draft kept) and its first two layers (some
// kept), the ground truth either way; the draft model's KV is let go at the end.
TEST(SpecDriverTest, ADraftModelGivesPlainDecodingsGreedyTokens) {
  REQUIRE_STORIES();
  Stories f;
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  GenerateOptions plain;
  plain.spec.max_tokens = 200;
  plain.spec.sampling.temperature = 0.0f;
  const auto want = generate(*f.llama, *f.cache, prompt, plain);
  ASSERT_TRUE(want.is_ok());
  for (int32_t layers : {5, 2}) {
    f.use_draft(layers);
    for (int32_t k : {1, 4, 16}) {
      GenerateOptions spec = plain;
      spec.speculative = {.method = SpecMethod::kDraft, .max_tokens = k, .adaptive = false};
      spec.draft_model = f.draft_llama.get();
      spec.draft_cache = &*f.draft_cache;
      const auto got = generate(*f.llama, *f.cache, prompt, spec);
      ASSERT_TRUE(got.is_ok()) << got.status().to_string();
      EXPECT_EQ(got->tokens, want->tokens) << layers << " layers, spec tokens " << k;
      EXPECT_EQ(got->logprobs, want->logprobs);
      EXPECT_GT(got->spec.accepted, 0u);
      if (layers == 5) {  // the target drafting for itself: only the end of the text cuts a draft short
        EXPECT_GE(got->spec.accepted + static_cast<uint64_t>(k), got->spec.draft_tokens) << "spec tokens " << k;
      } else {
        EXPECT_LT(got->spec.accepted, got->spec.draft_tokens);
      }
      EXPECT_EQ(f.draft_cache->blocks_free(), f.draft_cache->config().n_blocks);
    }
  }
  // A draft model of another vocabulary, or none, is refused.
  GenerateOptions none = plain;
  none.speculative.method = SpecMethod::kDraft;
  EXPECT_EQ(generate(*f.llama, *f.cache, prompt, none).status().code(), ErrorCode::kInvalidArgument);
  ModelConfig other = f.model.config;
  other.vocab_size += 1;
  const Status mismatch = draft_model_check(f.model.config, other, 512);
  EXPECT_EQ(mismatch.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(mismatch.message().find("vocabulary"), std::string::npos) << mismatch.message();
}

// The draft model's KV follows the sequence: after drafts that were partly rejected, what
// it proposes is what a proposer starting from nothing proposes for the same tokens, and
// it runs again only the tokens past the first rejected one.
TEST(DraftProposerTest, KeepsWhatStaysValidAndRedoesOnlyThePastARejection) {
  REQUIRE_STORIES();
  Stories f;
  f.use_draft(2);
  DraftProposer kept(*f.draft_runner, 128);
  std::vector<TokenId> tokens = f.prompt("Once upon a time, there was a little girl");
  std::vector<TokenId> draft, fresh_draft;
  size_t past_rejection = tokens.size();  // what the next proposal must run before drafting
  for (int step = 0; step < 24; ++step) {
    kept.begin_step();
    const uint64_t before = kept.tokens_run();
    ASSERT_TRUE(kept.propose(7, tokens, 4, draft).is_ok());
    EXPECT_EQ(kept.tokens_run() - before, past_rejection + 3) << "step " << step;  // then 3 drafts run
    {
      DraftProposer fresh(*f.draft_runner, 128);
      ASSERT_TRUE(fresh.propose(1, tokens, 4, fresh_draft).is_ok());
    }
    ASSERT_EQ(draft, fresh_draft) << "step " << step;
    ASSERT_EQ(draft.size(), 4u);
    // It holds the tokens and the three drafts that ran after them.
    std::vector<TokenId> want = tokens;
    want.insert(want.end(), draft.begin(), draft.begin() + 3);
    const std::span<const TokenId> holds = kept.holds(7);
    ASSERT_EQ(std::vector<TokenId>(holds.begin(), holds.end()), want) << "step " << step;
    // The target keeps step % 4 drafts, then samples a token the draft did not propose;
    // every third step a second token follows (a thinking budget's forced end).
    const auto keep = static_cast<size_t>(step % 4);
    tokens.insert(tokens.end(), draft.begin(), draft.begin() + static_cast<ptrdiff_t>(keep));
    tokens.push_back((draft[keep] + 1 + step) % f.model.config.vocab_size);
    past_rejection = 1;
    if (step % 3 == 0) {
      tokens.push_back(draft[0]);
      past_rejection = 2;
    }
  }
  EXPECT_EQ(kept.sequences(), 1u);
  kept.forget(7);
  EXPECT_EQ(kept.sequences(), 0u);
  EXPECT_EQ(f.draft_cache->blocks_free(), f.draft_cache->config().n_blocks);
}

// A long catch-up (a new sequence's prompt) runs a budget's worth a step, without drafts
// until it is done; where the draft cache is short, the sequences that proposed least
// recently give their blocks up first, and one that still does not fit drafts nothing
// but keeps what it holds.
TEST(DraftProposerTest, CatchesUpABudgetAStepAndTakesBlocksFromTheLeastRecent) {
  REQUIRE_STORIES();
  Stories f;
  f.use_draft(2);
  const std::vector<TokenId> prompt = f.prompt("Once upon a time, there was a little girl named Lily. She loved");
  ASSERT_GT(prompt.size(), 12u);
  DraftProposer budgeted(*f.draft_runner, 5);
  std::vector<TokenId> draft;
  int steps = 0;
  for (; steps < 10 && draft.empty(); ++steps) {
    budgeted.begin_step();
    const uint64_t before = budgeted.tokens_run();
    ASSERT_TRUE(budgeted.propose(1, prompt, 4, draft).is_ok());
    EXPECT_LE(budgeted.tokens_run() - before, draft.empty() ? 5u : 5u + 3u);
  }
  EXPECT_EQ(steps, static_cast<int>((prompt.size() + 4) / 5));  // 5 tokens a step, the last step drafts too
  EXPECT_EQ(draft.size(), 4u);
  budgeted.forget(1);

  // A cache of 3 blocks of 16: a sequence of 12 tokens and its drafts takes one, one of
  // 40 tokens three.
  ModelConfig c = f.draft_llama->config();
  KvCache small = std::move(KvCache::create(*f.backend, {c.n_layers, c.kv_dim(), 16, 3})).value();
  ModelRunner runner(*f.draft_llama, small);
  DraftProposer tight(runner, 128);
  const std::vector<TokenId> a(prompt.begin(), prompt.begin() + 12);
  std::vector<TokenId> b = a;
  b[5] = 300;
  std::vector<TokenId> long_one(40, 300);
  tight.begin_step();
  ASSERT_TRUE(tight.propose(1, a, 4, draft).is_ok());
  EXPECT_EQ(draft.size(), 4u);
  tight.begin_step();
  ASSERT_TRUE(tight.propose(2, long_one, 4, draft).is_ok());  // 3 blocks: takes sequence 1's
  EXPECT_EQ(draft.size(), 4u);
  EXPECT_TRUE(tight.holds(1).empty());
  ASSERT_TRUE(tight.propose(3, b, 4, draft).is_ok());  // no block free, and 2 proposed this step
  EXPECT_TRUE(draft.empty());
  EXPECT_EQ(tight.holds(2).size(), 43u);  // sequence 2 kept what it holds
  tight.begin_step();
  ASSERT_TRUE(tight.propose(3, b, 4, draft).is_ok());  // now 2 is the least recent: it goes
  EXPECT_EQ(draft.size(), 4u);
  EXPECT_TRUE(tight.holds(2).empty());
  tight.forget(3);
  EXPECT_EQ(small.blocks_free(), 3);
}

// Many sequences at once, each with what shapes its sampling (seeded temperature,
// penalties, top-k/p, logit bias, min_tokens, a grammar, top logprobs): each gets the
// tokens it gets without speculation.
TEST(SpecDriverTest, BatchedShapedAndSeededSequencesGetPlainDecodingsTokens) {
  REQUIRE_STORIES();
  Stories f;
  const std::string story = "Lily and Ben went to the park. Lily and Ben saw a big dog. Lily and Ben";
  const std::string gbnf = std::move(grammar::json_schema_to_gbnf(json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"}},"required":["name"]})"))).value();
  std::vector<SequenceRequest> requests;
  auto add = [&](std::string_view text, RequestSpec spec) {
    std::vector<TokenId> p = f.prompt(text);
    const auto n = static_cast<int32_t>(p.size());
    requests.push_back({.tokens = std::move(p), .n_prompt = n, .spec = std::move(spec)});
  };
  add(story, {.sampling = {.temperature = 0.0f}, .max_tokens = 60});
  add(story, {.sampling = {.temperature = 0.8f, .seed = 11}, .max_tokens = 60});
  add(story, {.sampling = {.temperature = 1.0f, .top_p = 0.9f, .top_k = 20, .seed = 5}, .max_tokens = 60, .top_logprobs = 3});
  add(story, {.sampling = {.temperature = 0.0f, .repetition_penalty = 1.2f, .presence_penalty = 0.3f,
                           .frequency_penalty = 0.2f},
              .max_tokens = 60});
  add(story, {.sampling = {.temperature = 0.0f}, .max_tokens = 60, .min_tokens = 40, .stop_ids = {2},
              .logit_bias = {{.id = 401, .bias = -100}}});
  add("Once upon a time", {.sampling = {.temperature = 0.7f, .seed = 3}, .max_tokens = 50, .stop_ids = {2}, .grammar = gbnf});
  add("Once upon a time", {.sampling = {.temperature = 0.0f}, .max_tokens = 120, .stop_ids = {2}});
  SpecStats stats;
  const auto want = f.run(f.config(SpecMethod::kNone), requests);
  for (bool adaptive : {true, false}) {
    const auto got = f.run(f.config(SpecMethod::kNgram, 6, adaptive), requests, &stats);
    ASSERT_EQ(want.size(), requests.size());
    for (const auto& [id, tokens] : want) EXPECT_EQ(got.at(id), tokens) << "request " << id << ", adaptive " << adaptive;
    EXPECT_GT(stats.accepted, adaptive ? 0u : 20u);
  }
  f.use_draft(4);  // a draft model: the target's first four layers
  const auto drafted = f.run(f.config(SpecMethod::kDraft, 4, false), requests, &stats);
  for (const auto& [id, tokens] : want) EXPECT_EQ(drafted.at(id), tokens) << "request " << id << ", draft model";
  EXPECT_GT(stats.accepted, 20u);
}

// Sampling: the distribution of tokens with speculation is plain sampling's, for prompt
// lookup and for a draft model. Between plain and each, over different seeds, a
// chi-squared test at the 0.1% level of the tokens at each position after the first
// (which is never drafted), with drafts at nearly every one.
TEST(SpecDriverTest, SampledTokensFollowPlainSamplingsDistribution) {
  REQUIRE_STORIES();
  Stories f;
  // "Once upon a time" and its greedy continuation, twice, then "Once upon a time": the
  // model's likely tokens are drafted, and so are others.
  const std::vector<TokenId> start = {403, 407, 261, 378};
  GenerateOptions greedy;
  greedy.spec.max_tokens = 24;
  greedy.spec.sampling.temperature = 0.0f;
  const auto story = generate(*f.llama, *f.cache, std::vector<TokenId>{1, 403, 407, 261, 378}, greedy);
  ASSERT_TRUE(story.is_ok());
  std::vector<TokenId> prompt = {1};
  for (int i = 0; i < 2; ++i) {
    prompt.insert(prompt.end(), start.begin(), start.end());
    prompt.insert(prompt.end(), story->tokens.begin(), story->tokens.end());
  }
  prompt.insert(prompt.end(), start.begin(), start.end());
#if defined(HEARTH_SANITIZE_THREAD)
  constexpr int kDraws = 640;  // 1600 draws took three minutes under ThreadSanitizer; the test keeps its 0.1% level
#else
  constexpr int kDraws = 1600;
#endif
  constexpr int kTokens = 8;
  // The draws 16 at a time, each 16 run to their ends (so that prefill never takes a step's
  // budget from drafts), in one driver: after the first 16, the prompt comes from the prefix
  // cache, and the draws cost their sampled tokens, not the prompt again.
  auto histogram = [&](SpecMethod method, uint64_t seed0, SpecStats& stats) {
    DriverConfig config = f.config(method, 4, false);
    config.spec.ngram_min = 1;  // drafts at nearly every position, good ones or not
    Driver driver(*f.runner, config);
    std::map<uint64_t, std::vector<TokenId>> out;
    for (int at = 0; at < kDraws; at += 16) {
      for (int i = at; i < at + 16; ++i) {
        const SequenceRequest r{.tokens = prompt, .n_prompt = static_cast<int32_t>(prompt.size()),
                                .spec = {.sampling = {.temperature = 0.6f, .seed = seed0 + static_cast<uint64_t>(i)},
                                         .max_tokens = kTokens, .ignore_stop = true}};
        EXPECT_EQ(*driver.add(static_cast<uint64_t>(i), r), FinishReason::kNone);
      }
      f.drain(driver, config, out);
    }
    EXPECT_EQ(out.size(), static_cast<size_t>(kDraws));
    EXPECT_GT(driver.scheduler().prefix_hits(), 0u);
    stats = driver.spec_stats();
    std::map<std::pair<size_t, TokenId>, double> h;  // (position, token)
    for (const auto& [id, tokens] : out) {
      EXPECT_EQ(tokens.size(), static_cast<size_t>(kTokens));
      for (size_t p = 1; p < tokens.size(); ++p) h[{p, tokens[p]}] += 1;  // the first token is never drafted
    }
    return h;
  };
  SpecStats none;
  const auto a = histogram(SpecMethod::kNone, 1000, none);
  EXPECT_EQ(none.draft_tokens, 0u);
  f.use_draft(4);  // the target's first four layers: drafts the model finds likely, kept or not
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    SpecStats spec;
    const auto b = histogram(method, method == SpecMethod::kNgram ? 90000 : 50000, spec);
    EXPECT_GT(spec.draft_tokens, static_cast<uint64_t>(kDraws * 4));
    EXPECT_GT(spec.accepted, static_cast<uint64_t>(kDraws));
    // Bins: each (position, token) seen at least 10 times in all; the rest pooled per position.
    std::map<std::pair<size_t, TokenId>, std::pair<double, double>> bins;
    std::map<std::pair<size_t, TokenId>, double> total;
    for (const auto& [k, n] : a) total[k] += n;
    for (const auto& [k, n] : b) total[k] += n;
    for (const auto& [k, n] : total) {
      auto& bin = bins[n >= 10 ? k : std::pair<size_t, TokenId>{k.first, -1}];
      bin.first += a.contains(k) ? a.at(k) : 0;
      bin.second += b.contains(k) ? b.at(k) : 0;
    }
    double chi2 = 0;
    for (const auto& [k, n] : bins) {
      const double sum = n.first + n.second;  // equal sample sizes: expected sum/2 each
      chi2 += (n.first - n.second) * (n.first - n.second) / sum;
    }
    const double df = static_cast<double>(bins.size()) - (kTokens - 1);  // one constraint per position
    // The 0.1% critical value, by Wilson-Hilferty: df (1 - 2/(9 df) + 3.09 sqrt(2/(9 df)))^3.
    const double critical = df * std::pow(1 - 2 / (9 * df) + 3.0902 * std::sqrt(2 / (9 * df)), 3);
    EXPECT_LT(chi2, critical) << spec_method_name(method) << ": " << bins.size() << " bins, " << spec.accepted
                              << " of " << spec.draft_tokens << " drafted tokens kept";
  }
}

}  // namespace
}  // namespace hearth
