// The resident KV segment: adopted when everything matches, rebuilt (never read) when
// the model, the broker, the geometry or the file itself does not.
#include "ipc/kv_segment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

KvSegmentConfig config() {
  KvSegmentConfig c;
  c.weights = {0x1234, 0x5678};
  c.owner_id = 42;
  c.geometry = {.n_layers = 2, .kv_dim = 8, .block_size = 4, .n_blocks = 16, .dtype = 1, .element_bytes = 2,
                .tp_rank = 0, .tp_size = 1, .n_slots = 3, .max_blocks = 5};
  return c;
}

// Writes a committed table and some K/V into a fresh segment, as an engine would.
void fill(const KvSegment& s) {
  KvSlotTable& t = s.table(1);
  t.request_id = 7;
  t.generation = 3;
  t.blocks()[0] = 11;
  t.blocks()[1] = 4;
  t.n_blocks = 2;
  t.check_logit = 1.5f;
  t.check.store(kv_check_pack(5, 99));
  t.committed.store(6);
  std::memset(s.k(), 0x11, 64);
  std::memset(s.v(), 0x22, 64);
}

TEST(KvSegmentTest, AMatchingSegmentIsAdoptedWithItsTablesAndData) {
  TempDir dir;
  const auto path = segment_path(dir.path(), "unit", "kv");
  uint64_t id = 0;
  {
    auto s = KvSegment::open_or_create(path, config());
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_FALSE(s->adopted());
    EXPECT_EQ(s->why_rebuilt(), "");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(static_cast<uint64_t>(st.st_size), kv_segment_bytes(config().geometry));
    // Page-aligned halves, each n_layers * n_blocks * block_size * kv_dim * 2 bytes, after the tables.
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s->k()) % 4096, 0u);
    EXPECT_EQ(s->v() - s->k(), 4096);  // 2 * 16 * 4 * 8 * 2 = 2048 bytes, one page
    EXPECT_GE(s->header().k_offset, s->header().tables_offset + 3 * s->header().table_stride);
    for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(s->table(i).committed.load(), 0);
    EXPECT_NE(s->header().id, 0u);
    id = s->header().id;
    fill(*s);
  }
  auto again = KvSegment::open_or_create(path, config());
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(again->adopted());
  EXPECT_EQ(again->header().id, id) << "the contents are the same: so is the id (tensor-parallel ranks compare it)";
  EXPECT_EQ(again->header().adoptions.load(), 1u);
  const KvSlotTable& t = again->table(1);
  EXPECT_EQ(t.committed.load(), 6);
  EXPECT_EQ(t.request_id, 7u);
  EXPECT_EQ(kv_check_pos(t.check.load()), 5);
  EXPECT_EQ(kv_check_token(t.check.load()), 99);
  EXPECT_EQ(t.blocks()[0], 11);
  EXPECT_EQ(t.blocks()[1], 4);
  EXPECT_EQ(static_cast<uint8_t>(again->k()[63]), 0x11);
  EXPECT_EQ(static_cast<uint8_t>(again->v()[0]), 0x22);
  again->clear_tables();
  EXPECT_EQ(again->table(1).committed.load(), 0);
  EXPECT_EQ(again->table(1).check.load(), 0u);
}

TEST(KvSegmentTest, AnotherModelBrokerOrGeometryOrABrokenFileIsRebuiltFromEmpty) {
  TempDir dir;
  const auto path = segment_path(dir.path(), "unit", "kv");
  struct Case {
    const char* what;
    std::function<void(KvSegmentConfig&)> change;
    std::function<void()> damage;
    std::string why;
  };
  const std::vector<Case> cases = {
      {"model", [](KvSegmentConfig& c) { c.weights.lo ^= 1; }, {}, "another model's cache"},
      {"broker", [](KvSegmentConfig& c) { c.owner_id = 43; }, {}, "another broker segment"},
      {"blocks", [](KvSegmentConfig& c) { c.geometry.n_blocks = 32; }, {}, "geometry differs"},
      {"dtype", [](KvSegmentConfig& c) { c.geometry.dtype = 0; c.geometry.element_bytes = 4; }, {}, "geometry differs"},
      {"slots", [](KvSegmentConfig& c) { c.geometry.n_slots = 4; }, {}, "geometry differs"},
      {"on a GPU now", [](KvSegmentConfig& c) { c.geometry.on_device = 1; }, {}, "were in host memory"},
      {"truncated", [](KvSegmentConfig&) {}, [&] { std::filesystem::resize_file(path, 5000); }, "truncated or corrupt"},
      {"tiny", [](KvSegmentConfig&) {}, [&] { std::filesystem::resize_file(path, 100); }, "is truncated"},
      {"magic", [](KvSegmentConfig&) {}, [&] {
         auto s = ShmSegment::attach(path, true);
         ASSERT_TRUE(s.is_ok());
         std::memset(s->data(), 0, 8);
       }, "not a hearth KV segment"},
      {"version", [](KvSegmentConfig&) {}, [&] {
         auto s = ShmSegment::attach(path, true);
         ASSERT_TRUE(s.is_ok());
         reinterpret_cast<KvHeader*>(s->data())->prologue.layout_version = 99;
       }, "KV layout version 99"},
      {"unfinished", [](KvSegmentConfig&) {}, [&] {  // its creator killed before it drew the id
         auto s = ShmSegment::attach(path, true);
         ASSERT_TRUE(s.is_ok());
         reinterpret_cast<KvHeader*>(s->data())->id = 0;
       }, "not finished by the process that created it"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::filesystem::remove(path);
    uint64_t old_id = 0;
    {
      auto s = KvSegment::open_or_create(path, config());
      ASSERT_TRUE(s.is_ok());
      old_id = s->header().id;
      fill(*s);
    }
    if (c.damage) c.damage();
    KvSegmentConfig now = config();
    c.change(now);
    auto s = KvSegment::open_or_create(path, now);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_FALSE(s->adopted());
    EXPECT_NE(s->why_rebuilt().find(c.why), std::string::npos) << s->why_rebuilt();
    // Nothing of the old one is read: tables void, data zero.
    for (uint32_t i = 0; i < now.geometry.n_slots; ++i) EXPECT_EQ(s->table(i).committed.load(), 0);
    if (!now.geometry.on_device) {
      EXPECT_EQ(static_cast<uint8_t>(s->k()[0]), 0);
    }
    EXPECT_EQ(std::filesystem::file_size(path), kv_segment_bytes(now.geometry));
    EXPECT_NE(s->header().id, old_id) << "new contents, a new id";
    EXPECT_NE(s->header().id, 0u);
  }
  // A geometry out of range is refused before anything is created.
  KvSegmentConfig bad = config();
  bad.geometry.block_size = 0;
  EXPECT_EQ(KvSegment::open_or_create(segment_path(dir.path(), "other", "kv"), bad).status().code(),
            ErrorCode::kInvalidArgument);
}

// K and V sit on 2 MiB pages, and an engine that adopts them maps them so: a fault per
// 2 MiB of context, not 512.
TEST(KvSegmentTest, KAndVAreOnHugePagesForTheEngineThatAdoptsThem) {
  TempDir dir("/dev/shm");
  const auto path = segment_path(dir.path(), "unit", "kv");
  KvSegmentConfig big = config();
  big.geometry.kv_dim = 256;
  big.geometry.block_size = 16;
  big.geometry.n_blocks = 384;  // 3 MiB a layer for K and for V: placed across 4 MiB strides
  const uint64_t bytes = kv_segment_bytes(big.geometry);
  ASSERT_GT(bytes, 6 * kHugePageBytes);
  {
    auto probe = ShmSegment::create(dir.path() / "probe", kHugePageBytes, HugePagePlan{});
    ASSERT_TRUE(probe.is_ok());
    if (probe->huge_bytes() == 0) {
      GTEST_SKIP() << "the kernel gave /dev/shm no huge pages now: " << probe->why_not_huge();
    }
  }
  {
    auto s = KvSegment::open_or_create(path, big);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    const std::string why = s->why_not_huge();
    if (why.find("no more 2 MiB pages") != std::string::npos || why.find("allowed") != std::string::npos) {
      GTEST_SKIP() << "the kernel gave /dev/shm too few huge pages now: " << why;
    }
    EXPECT_EQ(s->huge_bytes(), huge_page_floor(bytes)) << s->why_not_huge();
    EXPECT_EQ(s->why_not_huge(), "");
    std::memset(s->k(), 0x11, 4 * kHugePageBytes);
  }
  auto again = KvSegment::open_or_create(path, big);
  ASSERT_TRUE(again.is_ok());
  ASSERT_TRUE(again->adopted());
  for (uint64_t i = 0; i < 4 * kHugePageBytes; i += 4096) ASSERT_EQ(static_cast<uint8_t>(again->k()[i]), 0x11) << i;
  const auto* base = reinterpret_cast<volatile const std::byte*>(&again->header());
  for (uint64_t i = 0; i < bytes; i += kHugePageBytes) static_cast<void>(base[i]);
  EXPECT_EQ(huge_mapped_bytes(&again->header()), huge_page_floor(bytes)) << "every whole 2 MiB mapped huge";
}

// On a GPU the segment keeps the tables and index and names the device memory that holds
// K and V by its id; renew() makes an adopted one new in place when that memory is lost.
TEST(KvSegmentTest, OnAGpuTheSegmentHoldsTheBookkeepingAndRenewingVoidsItUnderANewId) {
  TempDir dir;
  const auto path = segment_path(dir.path(), "unit", "kv");
  KvSegmentConfig gpu = config();
  gpu.geometry.on_device = 1;
  const uint64_t layer = 16 * 4 * 8 * 2;  // blocks x block size x kv_dim x element bytes
  EXPECT_EQ(kv_device_v_offset(gpu.geometry), 2 * layer);  // two layers, already 256-aligned
  EXPECT_EQ(kv_device_bytes(gpu.geometry), 4 * layer);
  EXPECT_LT(kv_segment_bytes(gpu.geometry), kv_segment_bytes(config().geometry));
  uint64_t id = 0;
  {
    auto s = KvSegment::open_or_create(path, gpu);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    EXPECT_EQ(s->k(), nullptr);
    EXPECT_EQ(s->v(), nullptr);
    EXPECT_EQ(std::filesystem::file_size(path), kv_segment_bytes(gpu.geometry));
    id = s->header().id;
    KvSlotTable& t = s->table(1);
    t.request_id = 7;
    t.n_blocks = 1;
    t.check.store(kv_check_pack(3, 9));
    t.committed.store(4);
    s->record(2).published.store(1);
    s->header().rank_ids[1].store(77);
  }
  auto s = KvSegment::open_or_create(path, gpu);
  ASSERT_TRUE(s.is_ok());
  ASSERT_TRUE(s->adopted());
  EXPECT_EQ(s->header().id, id);
  EXPECT_EQ(s->table(1).committed.load(), 4);
  s->renew();
  EXPECT_FALSE(s->adopted());
  EXPECT_NE(s->header().id, id);
  EXPECT_NE(s->header().id, 0u);
  EXPECT_EQ(s->table(1).committed.load(), 0);
  EXPECT_EQ(s->table(1).check.load(), 0u);
  EXPECT_EQ(s->record(2).published.load(), 0u);
  EXPECT_EQ(s->header().rank_ids[1].load(), 0u);
  const uint64_t renewed = s->header().id;
  auto again = KvSegment::open_or_create(path, gpu);
  ASSERT_TRUE(again.is_ok());
  EXPECT_TRUE(again->adopted());
  EXPECT_EQ(again->header().id, renewed) << "the new id is what the next engine finds";
}

TEST(KvSegmentTest, DeviceMemoryNamesRoundTripAndOthersAreRefused) {
  const std::string uuid = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
  const KvDeviceRecord r{"default", 3, 0x00ab00cd00ef0012ull, 1ull << 34, uuid};
  const std::string name = kv_store_name(r);
  EXPECT_EQ(name, "hearth-kv.default.3.00ab00cd00ef0012.17179869184." + uuid);
  EXPECT_TRUE(name.starts_with(kv_store_prefix("default", 3)));
  auto back = kv_store_record(name);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, r);
  // The longest instance name still fits systemd's FDNAME (255 characters).
  const KvDeviceRecord longest{std::string(64, 'x'), 15, ~0ull, ~0ull, uuid};
  EXPECT_LE(kv_store_name(longest).size(), 255u);
  EXPECT_TRUE(kv_store_record(kv_store_name(longest)).is_ok());
  for (const std::string& bad : std::vector<std::string>{
           "hearth-slab.r0",
           "hearth-kv.",
           "hearth-kv.default.3.00ab00cd00ef0012.17179869184",            // no GPU
           "hearth-kv.default.3.00ab00cd00ef0012.17179869184.gpu-1234",   // not a uuid as nvidia-smi prints it
           "hearth-kv.default.3.ab00cd00ef0012.17179869184." + uuid,      // id not 16 digits
           "hearth-kv.default.3.0000000000000000.17179869184." + uuid,    // id 0: no segment's
           "hearth-kv.default.3.00ab00cd00ef001g.17179869184." + uuid,    // not hex
           "hearth-kv.default.16.00ab00cd00ef0012.17179869184." + uuid,   // no such rank
           "hearth-kv.default.-1.00ab00cd00ef0012.17179869184." + uuid,
           "hearth-kv.default.3.00ab00cd00ef0012.0." + uuid,              // empty
           "hearth-kv.default.3.00ab00cd00ef0012.99999999999999999999999." + uuid,
           "hearth-kv.de fault.3.00ab00cd00ef0012.17179869184." + uuid,    // not an instance name
           "hearth-kv..3.00ab00cd00ef0012.17179869184." + uuid,
           "hearth-kv.default.3.00ab00cd00ef0012.17179869184." + uuid + ".x",
       }) {
    EXPECT_EQ(kv_store_record(bad).status().code(), ErrorCode::kFormat) << bad;
  }
}

// What a restarted rank takes from its fd stores: only the memory kept for its segment's
// id on its GPU, at least as large as the cache; the rest of its own is stale and
// forgotten; other instances' and ranks' are not its business.
TEST(KvSegmentTest, ARankAdoptsOnlyTheDeviceMemoryOfItsSegmentAndForgetsItsStaleOnes) {
  const std::string gpu0 = "GPU-00000000-0000-0000-0000-000000000000";
  const std::string gpu1 = "GPU-11111111-1111-1111-1111-111111111111";
  const KvDeviceRecord want{"default", 1, 0x1234, 1000, gpu0};
  auto with = [&](auto change) {
    KvDeviceRecord r = want;
    change(r);
    return kv_store_name(r);
  };
  const std::vector<std::string> names = {
      with([](KvDeviceRecord& r) { r.segment_id = 0x9999; }),            // 0: an older segment's: stale
      with([](KvDeviceRecord& r) { r.instance = "other"; }),             // 1: another instance's
      with([](KvDeviceRecord& r) { r.rank = 0; }),                       // 2: another rank's
      with([](KvDeviceRecord& r) { r.bytes = 4096; }),                   // 3: rounded up by the driver: this one
      with([&](KvDeviceRecord& r) { r.device_uuid = gpu1; }),             // 4: another GPU: stale
      with([](KvDeviceRecord& r) { r.bytes = 999; }),                    // 5: too small: stale
      "hearth-slab.something",                                           // 6: not a KV record
      with([](KvDeviceRecord& r) { r.bytes = 4096; }),                   // 7: the same one, kept by a second store
  };
  KvKeptChoice c = kv_kept_choice(names, want);
  ASSERT_TRUE(c.adopt.has_value());
  EXPECT_EQ(*c.adopt, 3u);
  EXPECT_EQ(c.forget, (std::vector<size_t>{0, 4, 5}));
  // A segment that was not adopted (id 0 wanted): everything of its own is stale.
  KvDeviceRecord fresh = want;
  fresh.segment_id = 0;
  c = kv_kept_choice(names, fresh);
  EXPECT_FALSE(c.adopt.has_value());
  EXPECT_EQ(c.forget, (std::vector<size_t>{0, 3, 4, 5, 7}));
  EXPECT_FALSE(kv_kept_choice({}, want).adopt.has_value());
}

}  // namespace
}  // namespace hearth
