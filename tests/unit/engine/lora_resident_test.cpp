// Resident LoRA adapters: the adapter segment (ipc/lora_segment.h) written by the loader's
// calls (loader/lora_resident.h) and read back bit for bit, what is refused with nothing
// changed, a slot a dead writer left, the unload handshake, adoption by a restarted
// loader, malformed segments, and the engine's side (ResidentAdapters) on a model.
#include <gtest/gtest.h>

#include <fstream>

#include "engine/core/model.h"
#include "engine/core/model_input.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/serve/resident_adapters.h"
#include "ipc/lora_segment.h"
#include "loader/lora.h"
#include "loader/lora_resident.h"
#include "loader/resident.h"
#include "loader/synth.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

class LoraResidentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SynthOptions s;
    s.gguf = dir_.path() / "base.gguf";
    s.gguf_type = DType::kF32;
    ASSERT_TRUE(synth_write(s).is_ok());
    auto base = model_open(s.gguf);
    ASSERT_TRUE(base.is_ok()) << base.status().to_string();
    base_ = std::move(base).value();
    for (int i = 0; i < 3; ++i) {
      const int32_t rank = i == 2 ? 16 : 8;
      ASSERT_TRUE(lora_synth_write(base_, {.rank = rank, .alpha = 16, .seed = static_cast<uint64_t>(i + 1)},
                                   dir_.path() / fmt::format("a{}", i))
                      .is_ok());
    }
    weights_ = publish(1);
  }

  AttachedWeights publish(int tp) {
    ResidentOptions r;
    r.model = dir_.path() / "base.gguf";
    r.shm_dir = shm_.path();
    r.instance = fmt::format("tp{}", tp);
    r.tp = tp;
    auto published = resident_publish(r);
    EXPECT_TRUE(published.is_ok()) << published.status().to_string();
    auto w = weights_attach(published->segment.path());
    EXPECT_TRUE(w.is_ok()) << w.status().to_string();
    return std::move(w).value();
  }

  std::filesystem::path lora_path() const { return segment_path(shm_.path(), "tp1", "lora"); }

  LoraSegment open(uint32_t slots = 2, int32_t rank = 8, bool* adopted = nullptr) {
    auto o = lora_segment_open(weights_, {.path = lora_path(), .max_loras = slots, .max_rank = rank});
    EXPECT_TRUE(o.is_ok()) << o.status().to_string();
    if (adopted) *adopted = o->adopted;
    return std::move(o->segment);
  }

  testing::TempDir dir_;
  testing::TempDir shm_;
  LoadedModel base_;
  AttachedWeights weights_;
};

TEST_F(LoraResidentTest, ASplitBasesShapesAreTheWholeModels) {
  const AttachedWeights split = publish(2);
  const std::vector<TensorView> whole = lora_base_tensors(split);
  int checked = 0;
  for (const TensorView& t : base_.tensors) {
    const auto it = std::find_if(whole.begin(), whole.end(), [&](const TensorView& w) { return w.name == t.name; });
    ASSERT_NE(it, whole.end()) << t.name;
    for (int d = 0; d < t.n_dims; ++d) EXPECT_EQ(it->shape[d], t.shape[d]) << t.name;
    ++checked;
  }
  EXPECT_GT(checked, 10);
  EXPECT_EQ(lora_slot_bytes(split, 8), lora_slot_bytes(weights_, 8));
}

TEST_F(LoraResidentTest, AnAdapterIsReadBackAsTheLoaderReadIt) {
  LoraSegment seg = open();
  auto loaded = lora_segment_load(seg, weights_, "first", dir_.path() / "a0");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->slot, 0u);
  EXPECT_NE(loaded->id, 0u);
  const auto found = seg.find("first");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->id, loaded->id);
  auto back = seg.read(0, loaded->id);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  auto direct = lora_open(dir_.path() / "a0", base_.config, base_.tensors);
  ASSERT_TRUE(direct.is_ok());
  ASSERT_EQ(back->matrices.size(), direct->matrices.size());
  EXPECT_EQ(back->max_rank, 8);
  for (size_t i = 0; i < direct->matrices.size(); ++i) {
    const LoraMatrix& x = back->matrices[i];
    const LoraMatrix& y = direct->matrices[i];
    EXPECT_EQ(x.layer, y.layer);
    EXPECT_EQ(x.target, y.target);
    EXPECT_EQ(x.scale, y.scale);
    EXPECT_EQ(x.a, y.a);
    EXPECT_EQ(x.b, y.b);
  }
  EXPECT_EQ(seg.read(0, loaded->id + 1).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(seg.read(1, loaded->id).status().code(), ErrorCode::kNotFound);
}

TEST_F(LoraResidentTest, ARefusedAdapterChangesNothing) {
  LoraSegment seg = open(2, 8);
  ASSERT_TRUE(lora_segment_load(seg, weights_, "first", dir_.path() / "a0").is_ok());
  const std::vector<LoraSlotInfo> before = seg.list();
  std::filesystem::create_directories(dir_.path() / "bad");
  std::ofstream(dir_.path() / "bad" / "adapter_config.json") << "{\"r\": 8,";
  struct Case {
    std::string name;
    std::filesystem::path path;
    ErrorCode code;
  };
  const Case cases[] = {
      {"x", dir_.path() / "bad", ErrorCode::kFormat},              // malformed
      {"x", dir_.path() / "missing", ErrorCode::kNotFound},        // no such directory
      {"x", dir_.path() / "a2", ErrorCode::kOutOfRange},           // rank 16 > 8
      {"first", dir_.path() / "a1", ErrorCode::kInvalidArgument},  // the name is taken
      {"", dir_.path() / "a1", ErrorCode::kInvalidArgument},
      {"two words", dir_.path() / "a1", ErrorCode::kInvalidArgument},
      {std::string(64, 'n'), dir_.path() / "a1", ErrorCode::kInvalidArgument},
  };
  for (const Case& c : cases) {
    const auto r = lora_segment_load(seg, weights_, c.name, c.path);
    EXPECT_EQ(r.status().code(), c.code) << c.name << " " << c.path << ": " << r.status().to_string();
  }
  const auto after = seg.list();
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(after[0].id, before[0].id);
  for (uint32_t i = 0; i < seg.n_slots(); ++i) {
    EXPECT_NE(seg.slot(i).state.load(), static_cast<uint32_t>(LoraSlotState::kWriting)) << i;
  }
  // Full: the second slot taken, a third adapter has nowhere to go.
  ASSERT_TRUE(lora_segment_load(seg, weights_, "second", dir_.path() / "a1").is_ok());
  const auto full = lora_segment_load(seg, weights_, "third", dir_.path() / "a0");
  EXPECT_EQ(full.status().code(), ErrorCode::kOutOfRange) << full.status().to_string();
  EXPECT_NE(full.status().message().find("--max-loras"), std::string::npos);
}

TEST_F(LoraResidentTest, ASlotADeadWriterLeftIsFreeForTheNext) {
  LoraSegment seg = open(2, 8);
  ASSERT_TRUE(lora_segment_load(seg, weights_, "first", dir_.path() / "a0").is_ok());
  // A writer that died half way: its slot says WRITING, and the flock it held went with it.
  seg.slot(1).state.store(static_cast<uint32_t>(LoraSlotState::kWriting));
  auto loaded = lora_segment_load(seg, weights_, "second", dir_.path() / "a1");
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->slot, 1u);
}

TEST_F(LoraResidentTest, AnUnloadedSlotIsFreedOnlyUnderItsIdAndItsAdapterIsGone) {
  LoraSegment seg = open(2, 8);
  auto first = lora_segment_load(seg, weights_, "first", dir_.path() / "a0");
  ASSERT_TRUE(first.is_ok());
  ASSERT_TRUE(seg.begin_unload(0, first->id + 1).code() == ErrorCode::kNotFound) << "another load's id";
  ASSERT_TRUE(seg.begin_unload(0, first->id).is_ok());
  ASSERT_TRUE(seg.begin_unload(0, first->id).is_ok()) << "asked again: it stays UNLOADING";
  EXPECT_FALSE(seg.find("first").has_value()) << "no new request takes it";
  ASSERT_EQ(seg.list().size(), 1u);
  EXPECT_TRUE(seg.list()[0].unloading);
  EXPECT_TRUE(seg.read(0, first->id).is_ok()) << "requests admitted before still run with it";
  EXPECT_EQ(lora_segment_load(seg, weights_, "first", dir_.path() / "a1").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_FALSE(seg.free_unloaded(0, first->id + 1));
  EXPECT_TRUE(seg.free_unloaded(0, first->id));
  EXPECT_FALSE(seg.free_unloaded(0, first->id));
  EXPECT_EQ(seg.read(0, first->id).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(seg.list().empty());
  EXPECT_EQ(seg.begin_unload(0, first->id).code(), ErrorCode::kNotFound) << "freed: not made UNLOADING again";
  // Loaded again: the slot, under a new id.
  auto again = lora_segment_load(seg, weights_, "first", dir_.path() / "a0");
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(again->slot, 0u);
  EXPECT_NE(again->id, first->id);
  // An unload given up on makes it READY again.
  ASSERT_TRUE(seg.begin_unload(0, again->id).is_ok());
  ASSERT_TRUE(seg.cancel_unload(0, again->id).is_ok());
  EXPECT_TRUE(seg.find("first").has_value());
}

TEST_F(LoraResidentTest, ARestartedLoaderAdoptsTheSegmentOfItsBaseAndCapacity) {
  {
    LoraSegment seg = open(2, 8);
    ASSERT_TRUE(lora_segment_load(seg, weights_, "first", dir_.path() / "a0").is_ok());
  }
  bool adopted = false;
  LoraSegment same = open(2, 8, &adopted);
  EXPECT_TRUE(adopted);
  EXPECT_TRUE(same.find("first").has_value());
  auto other = lora_segment_open(weights_, {.path = lora_path(), .max_loras = 2, .max_rank = 16});
  ASSERT_TRUE(other.is_ok());
  EXPECT_FALSE(other->adopted);
  EXPECT_NE(other->why_new.find("capacity"), std::string::npos) << other->why_new;
  EXPECT_TRUE(other->segment.list().empty());
  // Another model's: replaced.
  const AttachedWeights split = publish(2);
  auto foreign = lora_segment_open(split, {.path = lora_path(), .max_loras = 2, .max_rank = 16});
  ASSERT_TRUE(foreign.is_ok());
  EXPECT_FALSE(foreign->adopted);
  EXPECT_NE(foreign->why_new.find("another model"), std::string::npos) << foreign->why_new;
}

TEST_F(LoraResidentTest, AMalformedSegmentIsRefusedNotRead) {
  LoraSegment seg = open(2, 8);
  auto first = lora_segment_load(seg, weights_, "first", dir_.path() / "a0");
  ASSERT_TRUE(first.is_ok());
  // A record that says a rank above the segment's: refused when read, not followed.
  const LoraHeader& h = seg.header();
  auto* record = reinterpret_cast<LoraRecord*>(
      const_cast<std::byte*>(reinterpret_cast<const std::byte*>(&h)) + h.slots_offset);
  const int32_t rank = record->rank;
  record->rank = 1 << 20;
  EXPECT_EQ(seg.read(0, first->id).status().code(), ErrorCode::kFormat);
  record->rank = rank;
  record->rows = -3;
  EXPECT_EQ(seg.read(0, first->id).status().code(), ErrorCode::kFormat);
  // Files that are no adapter segment.
  const auto junk = shm_.path() / "hearth.junk.lora";
  {
    std::ofstream(junk) << std::string(70000, '\0');
  }
  EXPECT_EQ(LoraSegment::attach(junk, false).status().code(), ErrorCode::kFormat);
  {
    std::ofstream(junk) << "short";
  }
  EXPECT_FALSE(LoraSegment::attach(junk, false).is_ok());
}

TEST_F(LoraResidentTest, TheEngineTakesTheAdapterARequestNamesAndRefusesAnUnloadedOne) {
  LoraSegment seg = open(2, 16);
  auto first = lora_segment_load(seg, weights_, "first", dir_.path() / "a0");
  auto second = lora_segment_load(seg, weights_, "second", dir_.path() / "a2");
  ASSERT_TRUE(first.is_ok() && second.is_ok());
  auto adapters = ResidentAdapters::attach(lora_path(), weights_.header->fingerprint);
  ASSERT_TRUE(adapters.is_ok()) << adapters.status().to_string();
  EXPECT_EQ(adapters->slots(), 2);
  EXPECT_EQ(adapters->max_rank(), 16);
  auto backend = make_cpu_backend({.threads = 1});
  auto model = Model::create(weights_.config, weights_.tensors(0), *backend, 64,
                             {.max_adapters = adapters->slots(), .max_lora_rank = adapters->max_rank()});
  ASSERT_TRUE(model.is_ok()) << model.status().to_string();
  Model& m = **model;
  EXPECT_EQ(adapters->use(m, 0, first->id + 1).code(), ErrorCode::kNotFound);
  EXPECT_FALSE(m.adapter_loaded(0));
  ASSERT_TRUE(adapters->use(m, 0, first->id).is_ok());
  EXPECT_TRUE(m.adapter_loaded(0));
  // A step naming slot 1 (as rank 0 sends it to the other ranks) loads what slot 1 holds.
  ModelInput input;
  input.clear(16);
  const std::vector<int32_t> blocks = {0};
  ASSERT_TRUE(input.add_sequence(std::vector<TokenId>{1, 2}, 0, blocks, 1, 1).is_ok());
  ASSERT_TRUE(adapters->sync(m, input).is_ok());
  EXPECT_TRUE(m.adapter_loaded(1));
  // Unloaded: no request is admitted with it any more; the engine frees it once nothing
  // names it.
  ASSERT_TRUE(seg.begin_unload(0, first->id).is_ok());
  EXPECT_TRUE(adapters->use(m, 0, first->id).is_ok()) << "admitted before the unload began";
  std::vector<std::pair<int32_t, uint64_t>> asked;
  adapters->release_unloaded([&](int32_t slot, uint64_t id) {
    asked.emplace_back(slot, id);
    return true;
  });
  EXPECT_EQ(asked, (std::vector<std::pair<int32_t, uint64_t>>{{0, first->id}}));
  EXPECT_EQ(seg.list().size(), 2u) << "still in use";
  adapters->release_unloaded([](int32_t, uint64_t) { return false; });
  EXPECT_EQ(seg.list().size(), 1u);
  EXPECT_EQ(adapters->use(m, 0, first->id).code(), ErrorCode::kNotFound);
  // Another model's segment is refused by name.
  EXPECT_EQ(ResidentAdapters::attach(lora_path(), Fingerprint{1, 2}).status().code(), ErrorCode::kInvalidArgument);
  auto none = ResidentAdapters::attach(shm_.path() / "hearth.none.lora", weights_.header->fingerprint);
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->present());
  EXPECT_EQ(none->use(m, 0, 1).code(), ErrorCode::kUnsupported);
}

}  // namespace
}  // namespace hearth
