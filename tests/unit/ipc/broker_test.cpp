#include "ipc/broker.h"

#include <gtest/gtest.h>
#include <unistd.h>

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
  engine->slot_finish(*slot, SlotState::kDone, SlotFinish::kLength);
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

}  // namespace
}  // namespace hearth
