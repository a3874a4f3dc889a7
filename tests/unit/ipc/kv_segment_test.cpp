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
      {"truncated", [](KvSegmentConfig&) {}, [&] { std::filesystem::resize_file(path, 5000); }, "inconsistent header or is truncated"},
      {"tiny", [](KvSegmentConfig&) {}, [&] { std::filesystem::resize_file(path, 100); }, "is truncated"},
      {"magic", [](KvSegmentConfig&) {}, [&] {
         auto s = ShmSegment::attach(path, true);
         ASSERT_TRUE(s.is_ok());
         std::memset(s->data(), 0, 8);
       }, "not a hearth KV segment"},
      {"version", [](KvSegmentConfig&) {}, [&] {
         auto s = ShmSegment::attach(path, true);
         ASSERT_TRUE(s.is_ok());
         reinterpret_cast<KvHeader*>(s->data())->layout_version = 99;
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
    EXPECT_EQ(static_cast<uint8_t>(s->k()[0]), 0);
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

}  // namespace
}  // namespace hearth
