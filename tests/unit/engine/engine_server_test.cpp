// The serving loop in-process: a real weights segment, a real broker, an EngineServer
// thread, and the broker client a frontend uses.
#include "engine/engine_server.h"

#include <gtest/gtest.h>

#include <thread>

#include "engine/generate.h"
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
    if (!std::filesystem::exists(shared_path(kGguf))) GTEST_SKIP() << "stories260K is absent";
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

  void TearDown() override { stop_engine(); }

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
    r.sampling.temperature = 0.0f;
    r.max_tokens = max_tokens;
    r.stop_ids = {2};
    return r;
  }

  // What the in-process generate loop gives for the same request.
  std::vector<TokenId> reference(const std::vector<TokenId>& prompt, int max_tokens) {
    auto model = model_open(shared_path(kGguf));
    auto backend = make_cpu_backend({false, 1});
    auto llama = LlamaModel::create(model->config, model->tensors, *backend, 64);
    auto cache = KvCache::create(*backend, {model->config.n_layers, model->config.kv_dim(), 16, 32});
    GenerateOptions o;
    o.max_tokens = max_tokens;
    o.sampling.temperature = 0.0f;
    o.stop_ids = {2};
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
  EXPECT_EQ(p.finish, SlotFinish::kLength);
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
  r.ignore_stop = true;
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  while (client_->progress(*slot).n_produced < 5) std::this_thread::sleep_for(1ms);
  client_->cancel(*slot);
  SlotProgress p;
  const auto ids = collect(*slot, &p, 10s);
  EXPECT_EQ(p.state, SlotState::kCancelled);
  EXPECT_LT(ids.size(), 450u);
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (client_->broker().header().stat_kv_blocks_used.load() != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(client_->broker().header().stat_kv_blocks_used.load(), 0u);
  EXPECT_EQ(client_->broker().header().stat_running.load(), 0u);
}

TEST_F(EngineServerTest, StopsAtStopIdsAndRefusesBadRequests) {
  SubmitRequest stop = greedy({1, 403, 407, 261, 378}, 50);
  stop.stop_ids = {286};  // the third greedy token
  SlotProgress p;
  EXPECT_EQ(collect(client_->submit(stop).value(), &p), (std::vector<TokenId>{432, 383, 286}));
  EXPECT_EQ(p.finish, SlotFinish::kStop);

  SubmitRequest bad = greedy({1, 403}, 5);
  bad.sampling.temperature = -1.0f;
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
  r.ignore_stop = true;
  const auto want = reference({1, 403, 407, 261, 378}, 120);
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  while (client_->progress(*slot).n_produced < 30) std::this_thread::sleep_for(1ms);
  stop_engine();  // as if it died: the slot stays RUNNING with what it produced
  EXPECT_EQ(client_->progress(*slot).state, SlotState::kRunning);
  EXPECT_FALSE(client_->engine_alive(1000ms));
  start_engine();
  const auto got = collect(*slot);
  ASSERT_EQ(got.size(), 120u);
  EXPECT_EQ(got, std::vector<TokenId>(want.begin(), want.begin() + 120));
  EXPECT_EQ(client_->broker().header().engine_epoch.load(), 2u);
}

TEST_F(EngineServerTest, ARestartedEngineContinuesASeededSampleWithTheSameDraws) {
  SubmitRequest r = greedy({1, 403, 407, 261, 378}, 100);
  r.ignore_stop = true;
  r.sampling.temperature = 1.0f;
  r.sampling.top_p = 0.9f;
  r.sampling.seed = 1234;
  const auto uninterrupted = collect(client_->submit(r).value());
  ASSERT_EQ(uninterrupted.size(), 100u);
  auto slot = client_->submit(r);
  ASSERT_TRUE(slot.is_ok());
  while (client_->progress(*slot).n_produced < 30) std::this_thread::sleep_for(1ms);
  stop_engine();
  start_engine();
  EXPECT_EQ(collect(*slot), uninterrupted);
  // A different seed gives a different text (the draws matter).
  r.sampling.seed = 99;
  EXPECT_NE(collect(client_->submit(r).value()), uninterrupted);
}

}  // namespace
}  // namespace hearth
