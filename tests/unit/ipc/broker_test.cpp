#include "ipc/broker.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <vector>

#include "ipc/broker_client.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

TEST(BrokerTest, SlotLifecycleAndPersistenceAcrossEngines) {
  TempDir dir;
  const auto path = dir.path() / "hearth.t.broker";
  auto engine = Broker::open_or_create(path, {8, 64});
  ASSERT_TRUE(engine.is_ok()) << engine.status().to_string();
  const uint64_t epoch = engine->engine_start();
  EXPECT_EQ(epoch, 1u);
  EXPECT_TRUE(engine->engine_alive(std::chrono::milliseconds(1000)));

  auto frontend = Broker::attach(path);
  ASSERT_TRUE(frontend.is_ok()) << frontend.status().to_string();
  auto index = frontend->frontend_register();
  ASSERT_TRUE(index.is_ok());
  auto slot = frontend->slot_claim(*index);
  ASSERT_TRUE(slot.has_value());
  SlotHeader& s = frontend->slot(*slot);
  EXPECT_EQ(s.state.load(), static_cast<uint32_t>(SlotState::kFilling));
  s.n_prompt = 3;
  frontend->prompt(*slot)[0] = 1;
  frontend->slot_submit(*slot);
  EXPECT_EQ(engine->ring().pop(), *slot);
  EXPECT_EQ(engine->slot(*slot).state.load(), static_cast<uint32_t>(SlotState::kQueued));

  // The engine produces two tokens and finishes.
  engine->slot(*slot).state.store(static_cast<uint32_t>(SlotState::kRunning));
  engine->produced(*slot)[0].id = 42;
  engine->slot_publish(*slot, 1);
  EXPECT_EQ(frontend->slot(*slot).n_produced.load(), 1);
  EXPECT_EQ(frontend->produced(*slot)[0].id, 42);
  engine->slot_finish(*slot, SlotState::kDone, FinishReason::kLength);
  EXPECT_EQ(s.state.load(), static_cast<uint32_t>(SlotState::kDone));
  frontend->slot_release(*slot);

  // A new engine keeps the slots (same dimensions) and takes a new epoch.
  auto second = Broker::open_or_create(path, {8, 64});
  ASSERT_TRUE(second.is_ok());
  EXPECT_EQ(second->engine_start(), 2u);
  EXPECT_EQ(second->prompt(*slot)[0], 1);
  // Different dimensions: a fresh broker.
  auto other = Broker::open_or_create(path, {4, 64});
  ASSERT_TRUE(other.is_ok());
  EXPECT_EQ(other->n_slots(), 4u);
  EXPECT_EQ(other->header().engine_epoch.load(), 0u);
}

// The engine's trust boundary: a slot another process wrote is read only when every count
// fits the slot and every value passes request_spec_validate, the frontend's own check,
// with the same codes.
TEST(BrokerTest, ReadRequestJudgesTheSlotLikeTheFrontendDid) {
  TempDir dir;
  auto broker = Broker::open_or_create(dir.path() / "hearth.t.broker", {4, 64});
  ASSERT_TRUE(broker.is_ok()) << broker.status().to_string();
  auto index = broker->frontend_register();
  ASSERT_TRUE(index.is_ok());
  struct Case {
    const char* what;
    void (*spoil)(SlotHeader&, LogitBias*);
    ErrorCode code;
    const char* says;
  };
  const Case cases[] = {
      {"clean", [](SlotHeader&, LogitBias*) {}, ErrorCode::kOk, ""},
      {"bias value", [](SlotHeader& s, LogitBias* b) { s.n_logit_bias = 1; b[0] = {.id = 3, .bias = 500.0f}; },
       ErrorCode::kOutOfRange, "logit_bias of token 3"},
      {"bias id", [](SlotHeader& s, LogitBias* b) { s.n_logit_bias = 1; b[0] = {.id = 99, .bias = 1.0f}; },
       ErrorCode::kOutOfRange, "logit_bias: token 99"},
      {"stop id", [](SlotHeader& s, LogitBias*) { s.n_stop_ids = 1; s.stop_ids[0] = 70; },
       ErrorCode::kOutOfRange, "stop_token_ids: token 70"},
      {"min_tokens", [](SlotHeader& s, LogitBias*) { s.min_tokens = -1; }, ErrorCode::kOutOfRange, "min_tokens"},
      {"top_logprobs", [](SlotHeader& s, LogitBias*) { s.top_logprobs = kMaxTopLogprobs + 1; },
       ErrorCode::kOutOfRange, "logprobs"},
      {"temperature", [](SlotHeader& s, LogitBias*) { s.sampling.temperature = -1.0f; },
       ErrorCode::kOutOfRange, "temperature"},
      {"bias count", [](SlotHeader& s, LogitBias*) { s.n_logit_bias = kMaxLogitBias + 1; },
       ErrorCode::kInvalidArgument, "malformed"},
      {"unknown flag", [](SlotHeader& s, LogitBias*) { s.flags = 1u << 5; }, ErrorCode::kInvalidArgument, "malformed"},
      {"pooling", [](SlotHeader& s, LogitBias*) { s.flags = 2u << kSlotPoolingShift; }, ErrorCode::kOk, ""},
      {"thinking budget", [](SlotHeader& s, LogitBias*) {
         s.flags = kSlotThinkingBudget;
         s.reasoning_budget = 8;
         s.reasoning_start = -1;
         s.reasoning_end = 64;  // outside the vocabulary of 64
       }, ErrorCode::kOutOfRange, "thinking budget"},
      {"budget fields without the flag", [](SlotHeader& s, LogitBias*) { s.reasoning_budget = -7; }, ErrorCode::kOk, ""},
  };
  for (const Case& c : cases) {
    auto slot = broker->slot_claim(*index);
    ASSERT_TRUE(slot.has_value());
    SlotHeader& s = broker->slot(*slot);
    s.sampling = {};
    s.max_tokens = 4;
    s.n_prompt = 2;
    s.n_stop_ids = 0;
    s.n_logit_bias = 0;
    s.min_tokens = 0;
    s.top_logprobs = 0;
    s.flags = 0;
    s.grammar_bytes = 0;
    broker->prompt(*slot)[0] = 1;
    broker->prompt(*slot)[1] = 2;
    c.spoil(s, broker->logit_bias(*slot));
    const auto r = broker->read_request(*slot, false, 64, 64);
    EXPECT_EQ(r.status().code(), c.code) << c.what << ": " << r.status().message();
    if (r.is_ok() && std::string_view(c.what) == "pooling") EXPECT_EQ(r->spec.pooling, Pooling::kMean);
    if (r.is_ok()) EXPECT_EQ(r->spec.reasoning_budget, -1) << c.what;
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << c.what << ": " << r.status().message();
    broker->slot_release(*slot);
  }
}

// What a frontend submits is what the engine reads: every field of the spec, through the
// slot's fields and flags.
TEST(BrokerTest, ASubmittedSpecIsReadBackWhole) {
  TempDir dir;
  const auto path = dir.path() / "hearth.t.broker";
  auto broker = Broker::open_or_create(path, {4, 64});
  ASSERT_TRUE(broker.is_ok()) << broker.status().to_string();
  auto client = BrokerClient::connect(path);
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  for (const bool embedding : {false, true}) {
    SubmitRequest r;
    r.prompt = {1, 5, 9};
    if (embedding) {
      r.spec = {.max_tokens = 1, .pooling = Pooling::kFirst};
    } else {
      r.spec = {.sampling = {.temperature = 0.5f, .top_k = 7, .seed = 11},
                .max_tokens = 20,
                .min_tokens = 2,
                .top_logprobs = 3,
                .ignore_stop = true,
                .stop_ids = {2, 3},
                .logit_bias = {{.id = 4, .bias = -1.5f}},
                .grammar = "root ::= \"a\"",
                .reasoning_budget = 6,
                .reasoning_start = 10,
                .reasoning_end = 11,
                .reasoning_open = true};
    }
    auto slot = client->submit(r);
    ASSERT_TRUE(slot.is_ok()) << slot.status().to_string();
    const auto got = broker->read_request(*slot, false, 64, 64);
    ASSERT_TRUE(got.is_ok()) << got.status().to_string();
    const RequestSpec& a = got->spec;
    const RequestSpec& b = r.spec;
    EXPECT_EQ(got->tokens, r.prompt);
    EXPECT_EQ(a.sampling.temperature, b.sampling.temperature);
    EXPECT_EQ(a.sampling.top_k, b.sampling.top_k);
    EXPECT_EQ(a.sampling.seed, b.sampling.seed);
    EXPECT_EQ(a.max_tokens, b.max_tokens);
    EXPECT_EQ(a.min_tokens, b.min_tokens);
    EXPECT_EQ(a.top_logprobs, b.top_logprobs);
    EXPECT_EQ(a.ignore_stop, b.ignore_stop);
    EXPECT_EQ(a.stop_ids, b.stop_ids);
    ASSERT_EQ(a.logit_bias.size(), b.logit_bias.size());
    EXPECT_EQ(a.grammar, b.grammar);
    EXPECT_EQ(a.pooling, b.pooling);
    EXPECT_EQ(a.reasoning_budget, b.reasoning_budget);
    EXPECT_EQ(a.reasoning_start, b.reasoning_start);
    EXPECT_EQ(a.reasoning_end, b.reasoning_end);
    EXPECT_EQ(a.reasoning_open, b.reasoning_open);
    client->release(*slot);
  }
}

TEST(BrokerTest, SlotsRunOutAndFrontendEntriesAreReclaimed) {
  TempDir dir;
  auto b = Broker::open_or_create(dir.path() / "b", {2, 32});
  ASSERT_TRUE(b.is_ok());
  const int f = b->frontend_register().value();
  auto a = b->slot_claim(f), c = b->slot_claim(f);
  ASSERT_TRUE(a && c);
  EXPECT_NE(*a, *c);
  EXPECT_FALSE(b->slot_claim(f).has_value());
  const uint32_t gen = b->slot(*a).generation.load();
  b->slot_release(*a);
  EXPECT_EQ(b->slot_claim(f), a);
  EXPECT_EQ(b->slot(*a).generation.load(), gen + 1) << "each claim is a new generation";
  // An entry held by a dead pid is free for the taking.
  b->header().frontends[1].pid.store(4194000);
  for (int i = 2; i < kMaxFrontends; ++i) b->header().frontends[i].pid.store(::getpid());
  auto again = b->frontend_register();
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(*again, 1);
  EXPECT_EQ(b->frontend_register().status().code(), ErrorCode::kResourceExhausted);
}

TEST(BrokerTest, DamagedBrokersAreRefused) {
  TempDir dir;
  const auto path = dir.path() / "b";
  ASSERT_TRUE(Broker::open_or_create(path, {2, 32}).is_ok());
  {
    auto seg = ShmSegment::attach(path, true);
    ASSERT_TRUE(seg.is_ok());
    reinterpret_cast<BrokerHeader*>(seg->data())->slot_tokens = 1 << 30;
  }
  auto r = Broker::attach(path);
  EXPECT_EQ(r.status().code(), ErrorCode::kFormat);
  EXPECT_EQ(Broker::attach(dir.path() / "absent").status().code(), ErrorCode::kUnavailable);
  // The engine replaces it.
  EXPECT_TRUE(Broker::open_or_create(path, {2, 32}).is_ok());
}

// A broker with one registered "frontend" whose entry the test controls.
class BrokerReclaimTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto b = Broker::open_or_create(dir_.path() / "b", {6, 32});
    ASSERT_TRUE(b.is_ok());
    broker_.emplace(std::move(b).value());
    frontend_ = broker_->frontend_register().value();
  }
  // A slot claimed by our frontend and left in `state`.
  uint32_t slot_in(SlotState state) {
    const auto s = broker_->slot_claim(frontend_);
    EXPECT_TRUE(s.has_value());
    broker_->slot(*s).state.store(static_cast<uint32_t>(state));
    return *s;
  }
  OwnerState owner_of(uint32_t slot, uint64_t now = monotonic_ns()) {
    const SlotHeader& s = broker_->slot(slot);
    return broker_->owner_state(s.owner.load(), s.owner_pid.load(), kStale, now);
  }
  uint32_t sweep(std::vector<uint64_t> holds = {}) {
    holds.resize(broker_->n_slots(), 0);
    return broker_->sweep_orphans(holds, suspects_, kStale, monotonic_ns());
  }
  SlotState state(uint32_t slot) { return static_cast<SlotState>(broker_->slot(slot).state.load()); }
  FrontendEntry& entry() { return broker_->header().frontends[frontend_]; }

  static constexpr auto kStale = std::chrono::milliseconds(500);
  TempDir dir_;
  std::optional<Broker> broker_;
  int frontend_ = -1;
  std::vector<uint64_t> suspects_ = std::vector<uint64_t>(6, 0);
};

TEST_F(BrokerReclaimTest, OwnerStatesFromPidEntryAndHeartbeat) {
  const uint32_t s = slot_in(SlotState::kQueued);
  EXPECT_EQ(owner_of(s), OwnerState::kAlive);
  // Silent: a live process whose heartbeat is older than the bound.
  EXPECT_EQ(owner_of(s, monotonic_ns() + 600'000'000ull), OwnerState::kSilent);
  // Exited: the entry released, reused by another process, or its pid gone.
  entry().pid.store(0);
  EXPECT_EQ(owner_of(s), OwnerState::kExited);
  entry().pid.store(1);  // init: alive, but not the slot's owner
  EXPECT_EQ(owner_of(s), OwnerState::kExited);
  entry().pid.store(4194000);
  broker_->slot(s).owner_pid.store(4194000);
  EXPECT_EQ(owner_of(s), OwnerState::kExited) << "no such process";
  EXPECT_EQ(broker_->owner_state(-1, 0, kStale, monotonic_ns()), OwnerState::kExited);
  EXPECT_EQ(broker_->owner_state(kMaxFrontends, 0, kStale, monotonic_ns()), OwnerState::kExited);
}

TEST_F(BrokerReclaimTest, SweepFreesQueuedAndFinishedSlotsOfGoneOwnersOnly) {
  const uint32_t queued = slot_in(SlotState::kQueued);
  const uint32_t done = slot_in(SlotState::kDone);
  const uint32_t running = slot_in(SlotState::kRunning);
  const uint32_t held = slot_in(SlotState::kCancelled);
  EXPECT_EQ(sweep(), 0u) << "the owner is alive";
  entry().heartbeat_ns.store(monotonic_ns() - 2'000'000'000ull);  // silent
  std::vector<uint64_t> holds(6, 0);
  holds[held] = 7;  // the engine still runs it: not the sweep's to free
  EXPECT_EQ(sweep(holds), 2u);
  EXPECT_EQ(state(queued), SlotState::kFree);
  EXPECT_EQ(state(done), SlotState::kFree);
  EXPECT_EQ(state(running), SlotState::kRunning) << "RUNNING slots are the engine's (reap) to end";
  EXPECT_EQ(state(held), SlotState::kCancelled);
  EXPECT_EQ(broker_->header().stat_reclaimed.load(), 2u);
}

TEST_F(BrokerReclaimTest, AFillingSlotIsFreedOnlyWhenItsOwnerHasSurelyExited) {
  const uint32_t filling = slot_in(SlotState::kFilling);
  entry().heartbeat_ns.store(monotonic_ns() - 2'000'000'000ull);  // silent: might still be writing
  EXPECT_EQ(sweep(), 0u);
  EXPECT_EQ(sweep(), 0u);
  EXPECT_EQ(state(filling), SlotState::kFilling);
  entry().pid.store(0);  // exited: freed on the second sweep that sees it so
  EXPECT_EQ(sweep(), 0u) << "first sighting";
  EXPECT_EQ(sweep(), 1u);
  EXPECT_EQ(state(filling), SlotState::kFree);
}

TEST_F(BrokerReclaimTest, ANewClaimBetweenTwoSweepsIsNotTaken) {
  // A slot whose claimer died before naming itself: owner -1 (cleared by the release).
  const uint32_t s = slot_in(SlotState::kDone);
  broker_->slot_release(s);
  EXPECT_EQ(broker_->slot(s).owner.load(), -1) << "a FREE slot names nobody";
  EXPECT_EQ(broker_->slot(s).owner_pid.load(), 0);
  broker_->slot(s).state.store(static_cast<uint32_t>(SlotState::kFilling));
  EXPECT_EQ(sweep(), 0u) << "first sighting";
  // Meanwhile a live frontend claims it properly (a new generation): not freed.
  broker_->slot(s).state.store(static_cast<uint32_t>(SlotState::kFree));
  ASSERT_EQ(broker_->slot_claim(frontend_), s);
  EXPECT_EQ(sweep(), 0u);
  EXPECT_EQ(state(s), SlotState::kFilling);
}

}  // namespace
}  // namespace hearth
