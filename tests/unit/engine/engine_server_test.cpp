// The serving loop in-process: a real weights segment, a real broker, an EngineServer
// thread, and the broker client a frontend uses.
#include "engine/serve/engine_server.h"

#include <gtest/gtest.h>

#include <thread>

#include "common/test_point.h"
#include "engine/core/generate.h"
#include "engine/cpu/cpu_backend.h"
#include "ipc/broker_client.h"
#include "loader/model.h"
#include "loader/resident.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using namespace std::chrono_literals;
using testing::shared_path;

const auto kGguf = "models/stories260K/stories260K.gguf";

class EngineServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(shared_path(kGguf))) {
      GTEST_SKIP() << "shared test file " << shared_path(kGguf).string() << " is absent (set HEARTH_SHARED)";
    }
    ResidentOptions r;
    r.model = shared_path(kGguf);
    r.shm_dir = shm_.path();
    r.instance = "e";
    ASSERT_TRUE(resident_publish(r).is_ok());
    options_.instance = "e";
    options_.shm_dir = shm_.path();
    options_.slots = 48;
    options_.context = 512;
    start_engine();
    auto c = BrokerClient::connect(segment_path(shm_.path(), "e", "broker"));
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    client_.emplace(std::move(c).value());
  }

  void TearDown() override {
    stop_engine();
    test_point_clear();
  }

  // Waits until a slot has `n` tokens; false after `limit`.
  bool wait_tokens(uint32_t slot, int32_t n, std::chrono::seconds limit = 10s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (client_->progress(slot).n_produced < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      const uint32_t seen = client_->news();
      if (client_->progress(slot).n_produced >= n) break;
      client_->wait(seen, 20ms);
    }
    return true;
  }

  // Waits until the engine's loop runs (its start-up scan is behind it).
  void wait_engine_running() {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!client_->engine_alive(1000ms) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(client_->engine_alive(1000ms));
  }

  // Stops the engine right after the step that published the `n`-th token of `slot`, as
  // if it died there: deterministic, whatever the machine's speed.
  void stop_engine_after_token(uint32_t slot, int32_t n) {
    ASSERT_TRUE(test_points_compiled()) << "configure with HEARTH_TEST_POINTS=ON (the default with tests)";
    test_point_set_callback("engine.step.sampled", [this, slot, n] {
      if (client_->progress(slot).n_produced >= n) server_->stop();
    });
  }

  void start_engine() {
    auto s = EngineServer::create(options_);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    server_ = std::move(s).value();
    thread_ = std::thread([this] { EXPECT_TRUE(server_->run().is_ok()); });
  }

  void stop_engine() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }

  // Waits for a slot to finish; returns the produced ids.
  std::vector<TokenId> collect(uint32_t slot, SlotProgress* out = nullptr, std::chrono::seconds limit = 30s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    SlotProgress p;
    while (std::chrono::steady_clock::now() < deadline) {
      const uint32_t seen = client_->news();
      p = client_->progress(slot);
      if (p.terminal()) break;
      client_->wait(seen, 50ms);
    }
    EXPECT_TRUE(p.terminal()) << "slot " << slot << " did not finish";
    std::vector<TokenId> ids;
    for (int32_t i = 0; i < p.n_produced; ++i) ids.push_back(client_->token(slot, i).id);
    if (out) *out = p;
    client_->release(slot);
    return ids;
  }

  static SubmitRequest greedy(std::vector<TokenId> prompt, int max_tokens) {
    SubmitRequest r;
    r.prompt = std::move(prompt);
    r.spec.sampling.temperature = 0.0f;
    r.spec.max_tokens = max_tokens;
    r.spec.stop_ids = {2};
    return r;
  }

  // What the in-process generate loop gives for the same request.
  std::vector<TokenId> reference(const std::vector<TokenId>& prompt, int max_tokens) {
    auto model = model_open(shared_path(kGguf));
    auto backend = make_cpu_backend({false, 1});
    auto llama = Model::create(model->config, model->tensors, *backend, 64);
    auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 32});
    GenerateOptions o;
    o.spec.max_tokens = max_tokens;
    o.spec.sampling.temperature = 0.0f;
    o.spec.stop_ids = {2};
    return generate(**llama, *cache, prompt, o)->tokens;
  }

  testing::TempDir shm_{::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : ""};
  EngineOptions options_;
  std::unique_ptr<EngineServer> server_;
  std::thread thread_;
  std::optional<BrokerClient> client_;
};

TEST_F(EngineServerTest, GreedyRequestGivesTheGroundTruthIds) {
  auto slot = client_->submit(greedy({1, 403, 407, 261, 378}, 16));
  ASSERT_TRUE(slot.is_ok()) << slot.status().to_string();
  SlotProgress p;
  const auto ids = collect(*slot, &p);
  EXPECT_EQ(ids, (std::vector<TokenId>{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}));
  EXPECT_EQ(p.state, SlotState::kDone);
  EXPECT_EQ(p.finish, FinishReason::kLength);
}

TEST_F(EngineServerTest, ThirtyTwoConcurrentRequestsEqualTheirSoloAnswers) {
  std::vector<std::vector<TokenId>> prompts;
  for (int i = 0; i < 32; ++i) {
    std::vector<TokenId> p = {1};
    for (int k = 0; k < 2 + (i * 7) % 23; ++k) p.push_back(3 + (i * 31 + k * 17) % 500);
    prompts.push_back(p);
  }
  std::vector<uint32_t> slots;
  for (int i = 0; i < 32; ++i) {
    auto s = client_->submit(greedy(prompts[static_cast<size_t>(i)], 20 + i % 7));
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    slots.push_back(*s);
  }
  for (int i = 0; i < 32; ++i) {
    const auto got = collect(slots[static_cast<size_t>(i)]);
    EXPECT_EQ(got, reference(prompts[static_cast<size_t>(i)], 20 + i % 7)) << "request " << i;
  }
}

TEST_F(EngineServerTest, CancelStopsTheRequestAndFreesItsBlocks) {
  SubmitRequest r = greedy({1, 403, 407}, 450);
  r.spec.ignore_stop = true;
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  ASSERT_TRUE(wait_tokens(*slot, 5));
  client_->cancel(*slot);
  SlotProgress p;
  const auto ids = collect(*slot, &p, 10s);
  EXPECT_EQ(p.state, SlotState::kCancelled);
  EXPECT_LT(ids.size(), 450u);
  // The stats are published after the step that cancelled it: one more loop at most.
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (client_->broker().header().stat_kv_blocks_used.load() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(client_->broker().header().stat_kv_blocks_used.load(), 0u);
  EXPECT_EQ(client_->broker().header().stat_running.load(), 0u);
  EXPECT_EQ(client_->broker().header().stat_cancelled.load(), 1u);
}

TEST_F(EngineServerTest, StopsAtStopIdsAndRefusesBadRequests) {
  SubmitRequest stop = greedy({1, 403, 407, 261, 378}, 50);
  stop.spec.stop_ids = {286};  // the third greedy token
  SlotProgress p;
  EXPECT_EQ(collect(client_->submit(stop).value(), &p), (std::vector<TokenId>{432, 383, 286}));
  EXPECT_EQ(p.finish, FinishReason::kStop);

  SubmitRequest bad = greedy({1, 403}, 5);
  bad.spec.sampling.temperature = -1.0f;
  collect(client_->submit(bad).value(), &p);
  EXPECT_EQ(p.state, SlotState::kFailed);
  EXPECT_NE(p.error.find("temperature"), std::string::npos) << p.error;

  SubmitRequest out_of_vocab = greedy({1, 9999}, 5);
  collect(client_->submit(out_of_vocab).value(), &p);
  EXPECT_EQ(p.state, SlotState::kFailed);

  EXPECT_EQ(client_->submit(greedy(std::vector<TokenId>(600, 5), 5)).status().code(), ErrorCode::kOutOfRange);
  EXPECT_EQ(client_->submit(greedy({}, 5)).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(EngineServerTest, ARestartedEngineResumesRequestsWithTheSameText) {
  SubmitRequest r = greedy({1, 403, 407, 261, 378}, 120);
  r.spec.ignore_stop = true;
  const auto want = reference({1, 403, 407, 261, 378}, 120);
  stop_engine_after_token(0, 30);  // the first free slot is 0
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  ASSERT_EQ(*slot, 0u);
  thread_.join();  // stopped after token 30, as if it died: the slot stays RUNNING
  test_point_clear();
  server_.reset();
  EXPECT_EQ(client_->progress(*slot).state, SlotState::kRunning);
  EXPECT_EQ(client_->progress(*slot).n_produced, 30);
  EXPECT_FALSE(client_->engine_alive(1000ms));
  start_engine();
  const auto got = collect(*slot);
  ASSERT_EQ(got.size(), 120u);
  EXPECT_EQ(got, std::vector<TokenId>(want.begin(), want.begin() + 120));
  EXPECT_EQ(client_->broker().header().engine_epoch.load(), 2u);
}

TEST_F(EngineServerTest, ARestartedEngineContinuesASeededSampleWithTheSameDraws) {
  SubmitRequest r = greedy({1, 403, 407, 261, 378}, 100);
  r.spec.ignore_stop = true;
  r.spec.sampling.temperature = 1.0f;
  r.spec.sampling.top_p = 0.9f;
  r.spec.sampling.seed = 1234;
  const auto uninterrupted = collect(client_->submit(r).value());
  ASSERT_EQ(uninterrupted.size(), 100u);
  stop_engine_after_token(0, 30);
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  ASSERT_EQ(*slot, 0u);
  thread_.join();
  test_point_clear();
  server_.reset();
  ASSERT_EQ(client_->progress(*slot).n_produced, 30) << "stopped mid-request, so the resume is tested";
  start_engine();
  EXPECT_EQ(collect(*slot), uninterrupted);
  // A different seed gives a different text (the draws matter).
  r.spec.sampling.seed = 99;
  EXPECT_NE(collect(client_->submit(r).value()), uninterrupted);
}

TEST_F(EngineServerTest, ASilentFrontendsRequestIsCancelledAndItsSlotFreed) {
  // This test's client never heartbeats (a frontend's pump would): with a 300 ms bound it
  // turns silent while its request runs. Steps are slowed so the request outlives that.
  stop_engine();
  options_.frontend_stale_ms = 300;
  test_point_set_callback("engine.step.planned", [] { std::this_thread::sleep_for(5ms); });
  start_engine();
  client_->heartbeat();
  SubmitRequest r = greedy({1, 403, 407}, 450);
  r.spec.ignore_stop = true;  // 450 steps of 5 ms: 2.25 s if nothing stopped it
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  const BrokerHeader& h = client_->broker().header();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  // The engine counts the cancel, then frees the slot and counts that: wait for both.
  while ((h.stat_cancelled.load() == 0 || h.stat_reclaimed.load() == 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_EQ(h.stat_cancelled.load(), 1u);
  EXPECT_GE(h.stat_reclaimed.load(), 1u);
  EXPECT_EQ(client_->progress(*slot).state, SlotState::kFree) << "nobody would read it: freed";
  EXPECT_LT(client_->progress(*slot).n_produced, 450);
}

TEST_F(EngineServerTest, AQueuedSlotTheRingNeverDeliveredIsFoundByTheScan) {
  // A frontend that stored QUEUED and died before pushing to the ring (its slot still
  // names a live owner here, this process), after the engine's start-up scan.
  wait_engine_running();
  Broker& b = client_->broker();
  const auto slot = b.slot_claim(client_->index());
  ASSERT_TRUE(slot.has_value());
  SlotHeader& s = b.slot(*slot);
  s.sampling = greedy({}, 0).spec.sampling;
  s.max_tokens = 16;
  s.n_prompt = 5;
  const TokenId prompt[] = {1, 403, 407, 261, 378};
  std::copy(std::begin(prompt), std::end(prompt), b.prompt(*slot));
  s.n_stop_ids = 0;
  s.state.store(static_cast<uint32_t>(SlotState::kQueued), std::memory_order_release);
  SlotProgress p;
  EXPECT_EQ(collect(*slot, &p, 10s),
            (std::vector<TokenId>{432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337}));
  EXPECT_EQ(p.state, SlotState::kDone);
}

TEST_F(EngineServerTest, ARingHoleIsSkippedAndWhatIsBehindItIsServed) {
  // A producer that claimed a ring position and died before filling it.
  wait_engine_running();
  Ring ring = client_->broker().ring();
  auto* header = reinterpret_cast<RingHeader*>(
      reinterpret_cast<std::byte*>(&client_->broker().header()) + client_->broker().header().ring_offset);
  header->enqueue_pos.fetch_add(1);
  const auto t0 = std::chrono::steady_clock::now();
  // A request behind it is served all the same (found by the slot scan).
  SlotProgress p;
  EXPECT_EQ(collect(client_->submit(greedy({1, 403, 407, 261, 378}, 16)).value(), &p, 10s).size(), 16u);
  EXPECT_EQ(p.state, SlotState::kDone);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1500ms) << "not held up by the hole's grace period";
  // The hole is skipped once it is older than its grace period (2 s), and the ring drains.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ring.size() != 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(ring.size(), 0u);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 1900ms) << "a live producer gets its grace period";
}

// The engine's knobs from the environment (hearth-engine's flags override them).
TEST(EngineOptionsTest, KnobsComeFromTheEnvironmentAndBadValuesAreRefused) {
  const char* names[] = {"HEARTH_MAX_BATCH_SIZE", "HEARTH_MAX_BATCHED_TOKENS", "HEARTH_PREFETCH_BUFFER",
                         "HEARTH_KV_BLOCKS"};
  ::setenv("HEARTH_MAX_BATCH_SIZE", "7", 1);
  ::setenv("HEARTH_MAX_BATCHED_TOKENS", "300", 1);
  ::setenv("HEARTH_PREFETCH_BUFFER", "9", 1);
  ::setenv("HEARTH_KV_BLOCKS", "1234", 1);
  EngineOptions o;
  ASSERT_TRUE(engine_options_from_env(o).is_ok());
  EXPECT_EQ(o.scheduler.max_batch_size, 7);
  EXPECT_EQ(o.scheduler.max_batched_tokens, 300);
  EXPECT_EQ(o.prefetch, 9);
  EXPECT_EQ(o.kv_blocks, 1234);
  for (const char* bad : {"0", "x", "12k", "99999999999"}) {
    ::setenv("HEARTH_MAX_BATCH_SIZE", bad, 1);
    EngineOptions b;
    const Status st = engine_options_from_env(b);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("HEARTH_MAX_BATCH_SIZE"), std::string::npos) << st.message();
  }
  for (const char* n : names) ::unsetenv(n);
  EngineOptions defaults;
  ASSERT_TRUE(engine_options_from_env(defaults).is_ok());
  EXPECT_EQ(defaults.scheduler.max_batch_size, EngineOptions{}.scheduler.max_batch_size);
}

}  // namespace
}  // namespace hearth
