// Tensor-parallel groups in one process (ranks as threads, each with its own mapping of
// the tp segment) and across processes (a forked rank killed with SIGKILL): the
// shared-memory collectives, the lifecycle (form, join, break on a gone rank or a
// timeout, form again), the tp segment's checks, and TP 2 against TP 1 on the real
// stories260K model, logits compared at every step.
#include "engine/tp/tp_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "engine/core/driver.h"
#include "engine/core/generate.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_runner.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/serve/engine_server.h"
#include "ipc/weights_segment.h"
#include "loader/lora.h"
#include "loader/model.h"
#include "loader/resident.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using testing::shared_path;
using testing::TempDir;

const auto kGguf = "models/stories260K/stories260K.gguf";

TpSegmentConfig small_config(uint32_t tp, uint64_t reduce_floats = 1000) {
  TpSegmentConfig c;
  c.tp_size = tp;
  c.weights = {1, 2};
  c.geometry = {512, 64, 16, 0, 64, 8, 4, 0};
  c.step_capacity = 4096;
  c.reduce_floats = reduce_floats;
  return c;
}

TpGroupOptions fast(int rank) {
  return {.rank = rank, .collective_timeout = 300ms, .rank_stale = 30s, .join_timeout = 5s};
}

// Rank r's membership over its own mapping of the segment at `path`.
std::unique_ptr<TpGroup> member(const std::filesystem::path& path, int rank, TpGroupOptions options) {
  auto seg = TpSegment::attach(path);
  EXPECT_TRUE(seg.is_ok()) << seg.status().to_string();
  EXPECT_TRUE(seg->register_rank(rank).is_ok());
  options.rank = rank;
  return std::make_unique<TpGroup>(std::move(*seg), options);
}

// Forms the group of `groups` (rank 0 first), the others joining from threads.
void form_all(std::vector<std::unique_ptr<TpGroup>>& groups) {
  std::vector<std::thread> joiners;
  for (size_t r = 1; r < groups.size(); ++r) {
    joiners.emplace_back([&g = *groups[r]] {
      auto j = g.join(5s);
      EXPECT_TRUE(j.is_ok() && *j);
    });
  }
  auto formed = groups[0]->form(5s);
  ASSERT_TRUE(formed.is_ok()) << formed.status().to_string();
  EXPECT_TRUE(*formed);
  for (auto& t : joiners) t.join();
  EXPECT_TRUE(groups[0]->active());
}

// A new segment at `path` and every rank of it, formed.
std::vector<std::unique_ptr<TpGroup>> formed_group(const std::filesystem::path& path, const TpSegmentConfig& config) {
  std::vector<std::unique_ptr<TpGroup>> groups;
  EXPECT_TRUE(TpSegment::open_or_create(path, config).is_ok());
  for (int r = 0; r < static_cast<int>(config.tp_size); ++r) groups.push_back(member(path, r, fast(r)));
  form_all(groups);
  return groups;
}

TEST(TpGroupTest, AllReduceGivesEveryRankTheRankOrderSumInChunks) {
  TempDir dir;
  auto groups = formed_group(dir.path() / "hearth.t.tp", small_config(3, 1000));
  const int64_t n = 2500;  // three chunks of the 1000-float buffers
  std::vector<std::vector<float>> data(3, std::vector<float>(n));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& d : data) {
    for (float& x : d) x = u(rng);
  }
  std::vector<float> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = (data[0][i] + data[1][i]) + data[2][i];
  std::vector<std::vector<uint8_t>> bytes(3, std::vector<uint8_t>(5000));
  for (size_t i = 0; i < bytes[1].size(); ++i) bytes[1][i] = static_cast<uint8_t>(i * 7);
  std::vector<std::thread> ranks;
  std::atomic<int> failures{0};
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      Communicator& c = groups[static_cast<size_t>(r)]->communicator();
      for (int round = 0; round < 5; ++round) {  // both buffer parities, several times
        std::vector<float> x = data[static_cast<size_t>(r)];
        if (!c.all_reduce_sum(x.data(), n).is_ok() || x != want) ++failures;
      }
      if (!c.broadcast(bytes[static_cast<size_t>(r)].data(), bytes[0].size(), 1).is_ok()) ++failures;
      if (!c.barrier().is_ok()) ++failures;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bytes[0], bytes[1]);
  EXPECT_EQ(bytes[2], bytes[1]);
}

TEST(TpGroupTest, ACollectiveWithoutItsPartnerTimesOutEndsTheEpochAndTheGroupFormsAgain) {
  TempDir dir;
  auto groups = formed_group(dir.path() / "hearth.t.tp", small_config(2));
  ASSERT_EQ(groups[0]->epoch(), 1u);
  // Rank 1 never arrives: rank 0's all-reduce gives up after the timeout, not never.
  float x[4] = {1, 2, 3, 4};
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = groups[0]->communicator().all_reduce_sum(x, 4);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable);
  EXPECT_NE(st.message().find("collective timeout"), std::string::npos) << st.message();
  EXPECT_GE(waited, 250ms);
  EXPECT_LT(waited, 3s);
  EXPECT_FALSE(groups[0]->active());
  // Rank 1 learns the epoch is over at its next wait, then both form epoch 2.
  ModelInput in;
  EXPECT_EQ(groups[1]->next_step(in, 1s).status().code(), ErrorCode::kUnavailable);
  form_all(groups);
  EXPECT_EQ(groups[0]->epoch(), 2u);
  EXPECT_EQ(groups[0]->segment().header().restarts.load(), 1u);
  EXPECT_EQ(groups[0]->segment().header().formed.load(), 2u);
}

TEST(TpGroupTest, StepsReachTheOtherRanksInOrderAsBytes) {
  TempDir dir;
  auto groups = formed_group(dir.path() / "hearth.t.tp", small_config(2));
  std::vector<int32_t> seen;
  std::thread follower([&] {
    ModelInput in;
    while (seen.size() < 20) {
      auto got = groups[1]->next_step(in, 5s);
      if (!got.is_ok() || !*got) return;
      seen.push_back(in.tokens.at(0));
    }
  });
  ModelInput in;
  const int32_t blocks[] = {0};
  for (int32_t i = 0; i < 20; ++i) {
    in.clear(16);
    const TokenId t[] = {i};
    ASSERT_TRUE(in.add_sequence(t, i % 16, blocks, true).is_ok());
    ASSERT_TRUE(groups[0]->publish(in).is_ok());
  }
  follower.join();
  std::vector<int32_t> want(20);
  for (int32_t i = 0; i < 20; ++i) want[static_cast<size_t>(i)] = i;
  EXPECT_EQ(seen, want);
}

// A rank in another process, killed with SIGKILL while a member.
TEST(TpGroupTest, ARankWhoseProcessDiesBreaksTheGroupAtOnceAndARestartedOneRejoins) {
  TempDir dir;
  const auto path = dir.path() / "hearth.t.tp";
  ASSERT_TRUE(TpSegment::open_or_create(path, small_config(2)).is_ok());
  auto rank0 = member(path, 0, {.rank = 0, .collective_timeout = 30s, .rank_stale = 30s, .join_timeout = 5s});
  auto spawn_rank1 = [&path] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      auto seg = TpSegment::attach(path);
      if (!seg.is_ok() || !seg->register_rank(1).is_ok()) ::_exit(3);
      TpGroup g(std::move(*seg), fast(1));
      auto joined = g.join(10s);
      if (!joined.is_ok() || !*joined) ::_exit(4);
      while (true) ::pause();
    }
    return pid;
  };
  const pid_t child = spawn_rank1();
  ASSERT_GT(child, 0);
  auto formed = rank0->form(10s);
  ASSERT_TRUE(formed.is_ok() && *formed);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  float x[2] = {1, 2};
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = rank0->communicator().all_reduce_sum(x, 2);  // the timeout is 30 s: liveness ends it
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  EXPECT_EQ(st.code(), ErrorCode::kUnavailable);
  EXPECT_NE(st.message().find("rank gone: rank 1"), std::string::npos) << st.message();
  // Its successor takes the entry (the old pid is dead) and the group forms again.
  const pid_t again = spawn_rank1();
  formed = rank0->form(10s);
  EXPECT_TRUE(formed.is_ok() && *formed);
  EXPECT_EQ(rank0->epoch(), 2u);
  EXPECT_EQ(rank0->segment().rank(1).pid.load(), again);
  ::kill(again, SIGKILL);
  ::waitpid(again, nullptr, 0);
}

TEST(TpSegmentTest, RefusesWhatItCannotTrustAndReplacesStaleSegments) {
  TempDir dir;
  const auto path = dir.path() / "hearth.t.tp";
  {
    std::ofstream(path) << std::string(20000, 'x');
  }
  EXPECT_EQ(TpSegment::attach(path).status().code(), ErrorCode::kFormat);
  // Garbage is replaced by rank 0; a matching segment is kept (waiting ranks stay).
  auto first = TpSegment::open_or_create(path, small_config(2));
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  EXPECT_EQ(first->register_rank(2).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(first->register_rank(-1).code(), ErrorCode::kInvalidArgument);
  ASSERT_TRUE(first->register_rank(1).is_ok());
  auto same = TpSegment::open_or_create(path, small_config(2));
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ(same->rank(1).pid.load(), ::getpid());
  EXPECT_FALSE(first->retired());
  // Another group size replaces it, and tells its mappers to attach again.
  auto other = TpSegment::open_or_create(path, small_config(4));
  ASSERT_TRUE(other.is_ok());
  EXPECT_TRUE(first->retired());
  EXPECT_EQ(other->tp_size(), 4);
  // A rank held by a live process of its own is refused, naming it; so is rank 0 of a
  // group whose rank 0 runs.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    auto seg = TpSegment::attach(path);
    if (!seg.is_ok() || !seg->register_rank(0).is_ok() || !seg->register_rank(1).is_ok()) ::_exit(3);
    (void)!::write(ready[1], "x", 1);
    while (true) ::pause();
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  const Status held = other->register_rank(1);
  EXPECT_EQ(held.code(), ErrorCode::kUnavailable);
  EXPECT_NE(held.message().find(std::to_string(child)), std::string::npos) << held.message();
  const auto refused = TpSegment::open_or_create(path, small_config(2));
  EXPECT_EQ(refused.status().code(), ErrorCode::kUnavailable);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  other->rank(1).kv_id.store(77);  // what the dead holder had said of its KV cache
  EXPECT_TRUE(other->register_rank(1).is_ok());  // its holder is gone
  EXPECT_EQ(other->rank(1).kv_id.load(), 0u) << "a new holder has said nothing of its KV cache yet";
  ::close(ready[0]);
  ::close(ready[1]);
}

class TpModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(shared_path(kGguf))) {
      GTEST_SKIP() << "shared test file " << shared_path(kGguf).string() << " is absent (set HEARTH_SHARED)";
    }
  }

  AttachedWeights publish(int tp) {
    ResidentOptions r;
    r.model = shared_path(kGguf);
    r.shm_dir = dir_.path();
    r.instance = fmt::format("tp{}", tp);
    r.tp = tp;
    EXPECT_TRUE(resident_publish(r).is_ok());
    auto w = weights_attach(segment_path(dir_.path(), r.instance, "weights"));
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    return std::move(w).value();
  }

  // Ranks 0 and 1 of a group of two on the weights split for two, in this process: rank
  // 0's runner publishes each step, which rank 1 runs on a thread of its own until the
  // group is destroyed.
  struct TwoRanks {
    std::unique_ptr<Backend> backend0 = make_cpu_backend({.threads = 1}), backend1 = make_cpu_backend({.threads = 1});
    std::vector<std::unique_ptr<TpGroup>> groups;
    std::optional<KvCache> cache0, cache1;
    std::unique_ptr<Model> model0, model1;
    std::unique_ptr<ModelRunner> runner0, runner1;
    std::atomic<bool> stop{false};
    std::atomic<int> shard_steps{0};
    std::thread rank1;
    ~TwoRanks() {
      stop.store(true);
      if (rank1.joinable()) rank1.join();
    }
  };
  std::unique_ptr<TwoRanks> two_ranks(const AttachedWeights& two, int32_t adapter_slots = 0) {
    const ModelConfig& c = two.config;
    auto g = std::make_unique<TwoRanks>();
    const auto path = dir_.path() / "hearth.tp2.tp";
    TpSegmentConfig tc = small_config(2, 64 * static_cast<uint64_t>(c.dim));
    tc.step_capacity = model_input_max_bytes(64, 1, 16);
    EXPECT_TRUE(TpSegment::open_or_create(path, tc).is_ok());
    for (int r = 0; r < 2; ++r) g->groups.push_back(member(path, r, {.rank = r}));
    for (int r = 0; r < 2; ++r) {
      Backend& b = r == 0 ? *g->backend0 : *g->backend1;
      (r == 0 ? g->cache0 : g->cache1)
          .emplace(std::move(KvCache::create(b, {c.n_layers, c.kv_dim() / 2, 16, 16, KvDType::kF32})).value());
      auto m = Model::create(c, two.tensors(r), b, 64,
                             {.comm = &g->groups[static_cast<size_t>(r)]->communicator(),
                              .max_adapters = adapter_slots,
                              .max_lora_rank = adapter_slots > 0 ? 64 : 0});
      EXPECT_TRUE(m.is_ok()) << m.status().to_string();
      (r == 0 ? g->model0 : g->model1) = std::move(m).value();
    }
    form_all(g->groups);
    g->runner0 = std::make_unique<ModelRunner>(*g->model0, *g->cache0, g->groups[0].get());
    g->runner1 = std::make_unique<ModelRunner>(*g->model1, *g->cache1);
    g->rank1 = std::thread([g = g.get()] {
      ModelInput in;
      while (!g->stop.load()) {
        auto got = g->groups[1]->next_step(in, 100ms);
        if (!got.is_ok()) return;
        if (*got && g->runner1->run_shard(in).is_ok()) ++g->shard_steps;
      }
    });
    return g;
  }

  TempDir dir_;
};

TEST_F(TpModelTest, TwoRanksGiveOneRanksLogitsAtEveryStepAndItsGreedyText) {
  const AttachedWeights one = publish(1), two = publish(2);
  const ModelConfig& c = one.config;
  auto backend = make_cpu_backend({.threads = 1});
  KvCache cache1 = std::move(KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 16, KvDType::kF32})).value();
  auto model1 = std::move(Model::create(c, one.tensors(0), *backend, 64)).value();
  ModelRunner runner1(*model1, cache1);
  const auto group = two_ranks(two);
  EXPECT_EQ(group->model0->rank_config().n_heads, c.n_heads / 2);
  ModelRunner& runner_r0 = *group->runner0;

  std::vector<TokenId> tokens = {1, 403, 407, 261, 378};
  const int32_t blocks[] = {0, 1, 2, 3};
  ModelInput in;
  double worst = 0;
  int32_t done = 0;  // positions already in the caches
  for (int step = 0; step < 40; ++step) {
    in.clear(16);
    ASSERT_TRUE(in.add_sequence(std::span(tokens).subspan(static_cast<size_t>(done)), done, blocks, true).is_ok());
    auto a = runner1.run(in);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    const std::vector<float> ref(a->begin(), a->end());
    auto b = runner_r0.run(in);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    float scale = 0;
    for (float v : ref) scale = std::max(scale, std::fabs(v));
    for (size_t i = 0; i < ref.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(ref[i] - (*b)[i]) / scale));
    }
    const auto best = [](std::span<const float> row) {
      return static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
    };
    ASSERT_EQ(best(ref), best(*b)) << "step " << step;
    done = static_cast<int32_t>(tokens.size());
    tokens.push_back(best(ref));
  }
  group->stop.store(true);
  group->rank1.join();
  EXPECT_LT(worst, 1e-4) << "largest difference of a logit, relative to the row's largest";
  EXPECT_EQ(group->shard_steps.load(), 40);
  const std::vector<TokenId> truth = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
  EXPECT_EQ(std::vector<TokenId>(tokens.begin() + 5, tokens.begin() + 21), truth);
}

// Speculative decoding in a group: drafted rows are rows of the step every rank runs,
// and the greedy output is one rank's plain output, with drafts kept along the way, by
// prompt lookup and by a draft model (the unsplit model, which rank 0 runs whole).
TEST_F(TpModelTest, SpeculationAtTwoRanksGivesOneRanksPlainGreedyText) {
  const AttachedWeights one = publish(1), two = publish(2);
  const ModelConfig& c = one.config;
  auto backend = make_cpu_backend({.threads = 1});
  KvCache cache1 = std::move(KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 16, KvDType::kF32})).value();
  auto model1 = std::move(Model::create(c, one.tensors(0), *backend, 64)).value();
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  GenerateOptions plain;
  plain.spec.max_tokens = 160;
  plain.spec.sampling.temperature = 0.0f;
  const auto want = generate(*model1, cache1, prompt, plain);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();

  const auto group = two_ranks(two);
  KvCache draft_cache = std::move(KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 16, KvDType::kF32})).value();
  ModelRunner draft(*model1, draft_cache);
  for (SpecMethod method : {SpecMethod::kNgram, SpecMethod::kDraft}) {
    DriverConfig dc{.scheduler = {.max_batch_size = 1, .max_batched_tokens = 64}, .max_sequence_tokens = 256};
    dc.spec = {.method = method, .max_tokens = 4};
    dc.draft = &draft;
    Driver driver(*group->runner0, dc);
    ASSERT_EQ(*driver.add(0, {.tokens = prompt, .n_prompt = 5, .spec = {.sampling = {.temperature = 0.0f}, .max_tokens = 160}}),
              FinishReason::kNone);
    std::vector<TokenId> got;
    const Status st = driver.run_until_idle([&](const StepEvent& e) {
      got.push_back(e.token.id);
      return true;
    });
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(got, want->tokens) << spec_method_name(method);
    EXPECT_GT(driver.spec_stats().accepted, method == SpecMethod::kDraft ? 100u : 0u) << spec_method_name(method);
  }
  EXPECT_EQ(draft_cache.blocks_free(), draft_cache.config().n_blocks);
}

// A LoRA adapter at two ranks (each holding B's rows of its q/k/v/gate/up share and A's
// columns of its o/down share): the greedy text of one rank running the base with the
// adapter merged into its weights.
TEST_F(TpModelTest, ALoraAdapterAtTwoRanksGivesTheMergedModelsGreedyText) {
  const AttachedWeights two = publish(2);
  auto base = model_open(shared_path(kGguf));
  ASSERT_TRUE(base.is_ok()) << base.status().to_string();
  const ModelConfig& c = base->config;
  std::vector<LoraAdapter> adapters;
  for (int32_t rank : {8, 32}) {
    const auto dir = dir_.path() / fmt::format("lora{}", rank);
    ASSERT_TRUE(lora_synth_write(*base, {.rank = rank, .alpha = 2.0 * rank, .seed = static_cast<uint64_t>(rank), .strength = 2.0}, dir).is_ok());
    auto a = lora_open(dir, c, base->tensors);
    ASSERT_TRUE(a.is_ok()) << a.status().to_string();
    adapters.push_back(std::move(a).value());
  }
  const auto group = two_ranks(two, 2);
  for (int32_t i = 0; i < 2; ++i) {
    { const Status set = group->model0->set_adapter(i, adapters[static_cast<size_t>(i)]); ASSERT_TRUE(set.is_ok()) << set.to_string(); }
    { const Status set = group->model1->set_adapter(i, adapters[static_cast<size_t>(i)]); ASSERT_TRUE(set.is_ok()) << set.to_string(); }
  }
  const std::vector<TokenId> prompt = {1, 403, 407, 261, 378};
  auto backend = make_cpu_backend({.threads = 1});
  for (int32_t i = 0; i < 2; ++i) {
    const auto path = dir_.path() / fmt::format("merged{}.gguf", i);
    ASSERT_TRUE(lora_merge_write(*base, adapters[static_cast<size_t>(i)], path).is_ok());
    auto merged = model_open(path);
    ASSERT_TRUE(merged.is_ok()) << merged.status().to_string();
    auto model = std::move(Model::create(merged->config, merged->tensors, *backend, 64)).value();
    KvCache cache = std::move(KvCache::create(*backend, {c.n_layers, c.kv_dim(), 16, 16, KvDType::kF32})).value();
    GenerateOptions plain;
    plain.spec.max_tokens = 100;
    plain.spec.ignore_stop = true;
    const auto want = generate(*model, cache, prompt, plain);
    ASSERT_TRUE(want.is_ok()) << want.status().to_string();
    Driver driver(*group->runner0, {.scheduler = {.max_batch_size = 1, .max_batched_tokens = 64}, .max_sequence_tokens = 256});
    ASSERT_EQ(*driver.add(0, {.tokens = prompt, .n_prompt = 5, .spec = {.max_tokens = 100, .ignore_stop = true}, .adapter = i}),
              FinishReason::kNone);
    std::vector<TokenId> got;
    const Status st = driver.run_until_idle([&](const StepEvent& e) {
      got.push_back(e.token.id);
      return true;
    });
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    EXPECT_EQ(got, want->tokens) << "adapter of rank " << adapters[static_cast<size_t>(i)].max_rank;
    const std::vector<TokenId> plain_truth = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337};
    EXPECT_NE(std::vector<TokenId>(got.begin(), got.begin() + 16), plain_truth) << "the adapter changes the text";
  }
}

TEST_F(TpModelTest, ARankRefusesAGroupItCannotBePartOfNamingTheNumbers) {
  publish(2);
  EngineOptions o;
  o.instance = "tp2";
  o.shm_dir = dir_.path();
  o.tp = 1;
  auto wrong_tp = engine_rank_start(o);
  EXPECT_EQ(wrong_tp.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(wrong_tp.status().message().find("split for 2 ranks"), std::string::npos) << wrong_tp.status().message();
  o.tp = 2;
  o.rank = 2;
  auto wrong_rank = engine_rank_start(o);
  EXPECT_NE(wrong_rank.status().message().find("--rank 2 is not a rank of a group of 2"), std::string::npos)
      << wrong_rank.status().message();
  o.rank = 1;
  EXPECT_TRUE(engine_rank_start(o).is_ok());
  o.instance = "absent";
  EXPECT_EQ(engine_rank_start(o).status().code(), ErrorCode::kNotFound);  // started before the loader
  // Heads that do not split.
  ModelConfig c = publish(1).config;
  EXPECT_NE(model_rank_config(c, 0, 3).status().message().find("8 query heads, 4 KV heads"), std::string::npos);
}

}  // namespace
}  // namespace hearth
