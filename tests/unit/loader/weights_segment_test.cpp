// A stale or damaged weights segment is refused with a message that says what is wrong,
// field by field (ipc/README.md "Readers check ..."): a real segment of stories260K,
// published by resident_publish, damaged one field at a time.
#include "ipc/weights_segment.h"

#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/vfs.h>

#include <cstring>
#include <functional>

#include "engine/core/generate.h"
#include "engine/cpu/cpu_backend.h"
#include "loader/resident.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::shared_path;
using testing::TempDir;

class WeightsSegmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto model = shared_path("models/stories260K/stories260K.gguf");
    HEARTH_REQUIRE_SHARED(model);
    ResidentOptions o;
    o.model = model;
    o.shm_dir = dir_.path();
    o.instance = "good";
    auto published = resident_publish(o);
    ASSERT_TRUE(published.is_ok()) << published.status().to_string();
    good_ = segment_path(dir_.path(), "good", "weights");
  }

  // A copy of the good segment with `damage` applied, as attach sees it.
  Status attach_damaged(const std::function<void(WeightsHeader&, WeightsEntry*, std::byte*)>& damage) {
    const auto path = dir_.path() / "hearth.bad.weights";
    std::filesystem::copy_file(good_, path, std::filesystem::copy_options::overwrite_existing);
    {
      auto seg = ShmSegment::attach(path, /*writable=*/true);
      EXPECT_TRUE(seg.is_ok());
      auto* h = reinterpret_cast<WeightsHeader*>(seg->data());
      damage(*h, reinterpret_cast<WeightsEntry*>(seg->data() + h->manifest_offset), seg->data());
    }
    return weights_attach(path).status();
  }

  // stories260K as instance "huge" in `dir`, with --hugepages.
  static Result<ResidentSegment> publish_with_hugepages(const std::filesystem::path& dir) {
    ResidentOptions o;
    o.model = shared_path("models/stories260K/stories260K.gguf");
    o.shm_dir = dir;
    o.instance = "huge";
    o.hugepages = true;
    return resident_publish(o);
  }

  TempDir dir_;
  std::filesystem::path good_;
};

TEST_F(WeightsSegmentTest, TheUndamagedCopyAttaches) {
  EXPECT_TRUE(attach_damaged([](WeightsHeader&, WeightsEntry*, std::byte*) {}).is_ok());
}

TEST_F(WeightsSegmentTest, EveryDamagedFieldIsNamed) {
  struct Case {
    const char* what;
    std::function<void(WeightsHeader&, WeightsEntry*, std::byte*)> damage;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"magic", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.prologue.magic ^= 1; }, "wrong magic"},
      {"layout version", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.prologue.layout_version = 99; },
       "layout version 99"},
      {"total size", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.prologue.total_bytes += 64; }, "truncated or corrupt"},
      {"tensor-parallel size", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.tp_size = 0; },
       "invalid tensor-parallel size 0"},
      {"manifest count", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.n_entries = uint64_t{1} << 40; },
       "sections outside the file"},
      {"config offset", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.config_offset = h.prologue.total_bytes; },
       "sections outside the file"},
      {"tokenizer bytes", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.tokenizer_bytes = h.prologue.total_bytes; },
       "sections outside the file"},
      {"rank region", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.rank_bytes[0] = h.prologue.total_bytes; },
       "rank 0 data outside the file"},
      {"state", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.state.store(7); }, "invalid state (7)"},
      {"alignment", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.data_alignment = 48; },
       "invalid data alignment 48"},
      {"alignment the rank region lacks",
       [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.data_alignment = static_cast<uint32_t>(kHugePageAlignment); },
       "rank 0 data does not start on a 2097152-byte boundary"},
      {"huge page bytes", [](WeightsHeader& h, WeightsEntry*, std::byte*) { h.huge_page_bytes = 4096; },
       "claims 4096 bytes on 2 MiB pages"},
      {"entry dtype", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].dtype = 99; }, "manifest entry 3 is corrupt"},
      {"entry dimensions", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].n_dims = 0; },
       "manifest entry 3 is corrupt"},
      {"entry rank", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].rank = 1; }, "manifest entry 3 is corrupt"},
      {"entry split", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].split = 9; }, "manifest entry 3 is corrupt"},
      {"entry name", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].name[0] = '\0'; },
       "manifest entry 3 is corrupt"},
      {"entry shape", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].shape[0] = 0; }, "has a corrupt shape"},
      {"entry huge shape", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].shape[0] = int64_t{1} << 41; },
       "has a corrupt shape"},
      {"entry bytes", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].bytes += 4; },
       "outside its rank's data or has the wrong size"},
      {"entry offset", [](WeightsHeader& h, WeightsEntry* e, std::byte*) { e[3].offset = h.prologue.total_bytes; },
       "outside its rank's data or has the wrong size"},
      {"entry misaligned", [](WeightsHeader&, WeightsEntry* e, std::byte*) { e[3].offset += 4; },
       "outside its rank's data or has the wrong size"},
      {"entry before its region", [](WeightsHeader& h, WeightsEntry* e, std::byte*) { e[3].offset = h.manifest_offset; },
       "outside its rank's data or has the wrong size"},
      {"row-interleaved vector",
       [](WeightsHeader&, WeightsEntry* e, std::byte*) {
         for (int i = 0;; ++i) {
           if (e[i].n_dims == 1) {
             e[i].dtype = static_cast<uint32_t>(DType::kQ8_0R16);
             return;
           }
         }
       },
       "row-interleaved but its rows are not whole groups"},
      {"layout name",
       [](WeightsHeader& h, WeightsEntry*, std::byte*) { std::strncpy(h.layout, "gpu-tiles", sizeof(h.layout)); },
       "unknown tensor layout \"gpu-tiles\""},
      {"row-interleaved matrix in a plain layout",
       [](WeightsHeader& h, WeightsEntry* e, std::byte*) {
         std::strncpy(h.layout, "plain", sizeof(h.layout));
         for (int i = 0;; ++i) {
           if (e[i].n_dims == 2 && e[i].shape[0] % 16 == 0) {
             e[i].dtype = static_cast<uint32_t>(DType::kQ8_0R16);
             return;
           }
         }
       },
       "row-interleaved in a plain layout"},
      {"config JSON", [](WeightsHeader& h, WeightsEntry*, std::byte* base) { base[h.config_offset] = std::byte{'#'}; },
       "config"},
      {"config values",
       [](WeightsHeader& h, WeightsEntry*, std::byte* base) {
         char* json = reinterpret_cast<char*>(base + h.config_offset);
         char* n = std::strstr(json, "\"n_layers\":5");
         ASSERT_NE(n, nullptr);
         n[std::strlen("\"n_layers\":")] = '0';
       },
       "layer count is 0"},
  };
  for (const Case& c : cases) {
    const Status st = attach_damaged(c.damage);
    EXPECT_FALSE(st.is_ok()) << c.what << " was not noticed";
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.what << ": " << st.message();
    EXPECT_NE(st.message().find("hearth.bad.weights"), std::string::npos) << c.what << " names the file: " << st.message();
  }
}

TEST_F(WeightsSegmentTest, HugePagesAlignTheDataToTwoMiB) {
  TempDir shm("/dev/shm");  // a tmpfs: the flag fails where huge pages cannot be had
  auto published = publish_with_hugepages(shm.path());
  if (!published.is_ok() && (published.status().code() == ErrorCode::kUnsupported ||
                              published.status().code() == ErrorCode::kResourceExhausted)) {
    GTEST_SKIP() << "this kernel gives /dev/shm no huge pages now: " << published.status().to_string();
  }
  ASSERT_TRUE(published.is_ok()) << published.status().to_string();
  auto w = weights_attach(segment_path(shm.path(), "huge", "weights"));
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  // The tensor data starts on a huge page and fills whole ones; tensors inside it stay
  // 64-byte aligned (a 2 MiB boundary each would waste up to 2 MiB per tensor).
  EXPECT_EQ(w->header->data_alignment, kHugePageAlignment);
  EXPECT_EQ(w->header->rank_offset[0] % kHugePageAlignment, 0u);
  EXPECT_EQ(w->header->prologue.total_bytes % kHugePageAlignment, 0u);
  EXPECT_EQ(w->header->huge_page_bytes, w->header->prologue.total_bytes) << "the header says where the weights landed";
  for (const WeightsEntry& e : w->entries()) {
    EXPECT_EQ(e.offset % kTensorAlignment, 0u) << e.name;
    EXPECT_GE(e.offset, w->header->rank_offset[0]) << e.name;
  }
  // Without the flag the data starts right after the header sections, 64-byte aligned.
  auto plain = weights_attach(good_);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->header->data_alignment, kTensorAlignment);
  EXPECT_NE(plain->header->rank_offset[0] % kHugePageAlignment, 0u);
  EXPECT_EQ(plain->header->huge_page_bytes, 0u);
}

// In a directory that is no tmpfs (the system temporary directory) --hugepages is refused,
// leaving nothing behind, unless the file system's page cache did hold the weights in 2 MiB
// pages (ext4 with large folios may), which the header then says.
TEST_F(WeightsSegmentTest, HugePagesAreHadOrRefusedAndNeverPretended) {
  struct statfs fs {};
  ASSERT_EQ(::statfs(dir_.path().c_str(), &fs), 0);
  if (fs.f_type == TMPFS_MAGIC || fs.f_type == OVERLAYFS_SUPER_MAGIC) {
    GTEST_SKIP() << dir_.path() << " is a tmpfs (or may be one under an overlay), where huge pages may be had";
  }
  auto published = publish_with_hugepages(dir_.path());
  if (published.is_ok()) {
    auto w = weights_attach(segment_path(dir_.path(), "huge", "weights"));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->header->huge_page_bytes, w->header->prologue.total_bytes);
    return;
  }
  EXPECT_TRUE(published.status().code() == ErrorCode::kUnsupported ||
              published.status().code() == ErrorCode::kResourceExhausted)
      << published.status().to_string();
  EXPECT_NE(published.status().message().find("drop --hugepages"), std::string::npos) << published.status().message();
  EXPECT_FALSE(std::filesystem::exists(segment_path(dir_.path(), "huge", "weights")));
  // Without the flag the same directory serves.
  EXPECT_TRUE(weights_attach(good_).is_ok());
}

// The loader writes the layout it is asked for and names it; a model runs the same
// tokens from either.
TEST_F(WeightsSegmentTest, TheLoaderWritesTheLayoutItIsAskedForAndNamesIt) {
  std::vector<std::vector<TokenId>> outputs;
  for (const char* layout : {"cpu-r16", "plain"}) {
    ResidentOptions o;
    o.model = shared_path("models/stories260K/stories260K.gguf");
    o.shm_dir = dir_.path();
    o.instance = std::string("q8-") + layout;
    o.quant = DType::kQ8_0;
    o.layout = layout;
    auto published = resident_publish(o);
    ASSERT_TRUE(published.is_ok()) << published.status().to_string();
    auto w = weights_attach(segment_path(dir_.path(), o.instance, "weights"));
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    EXPECT_EQ(w->layout, layout);
    int interleaved = 0;
    for (const TensorView& t : w->tensors(0)) interleaved += dtype_row_group(t.dtype) > 1;
    if (o.layout == kLayoutPlain) {
      EXPECT_EQ(interleaved, 0);
    } else {
      EXPECT_GT(interleaved, 0);
    }
    auto backend = make_cpu_backend();
    const auto tensors = w->tensors(0);
    auto llama = Model::create(w->config, tensors, *backend, 16, {.layout = w->layout});
    ASSERT_TRUE(llama.is_ok()) << llama.status().to_string();
    auto cache = KvCache::create(*backend, {w->config.n_layers, w->config.kv_dim(), 16, 8});
    ASSERT_TRUE(cache.is_ok());
    GenerateOptions g;
    g.spec.max_tokens = 24;
    g.spec.sampling.temperature = 0.0f;
    auto r = generate(**llama, *cache, std::vector<TokenId>{1, 403, 407, 261, 378}, g);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    outputs.push_back(r->tokens);
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  ResidentOptions bad;
  bad.model = shared_path("models/stories260K/stories260K.gguf");
  bad.shm_dir = dir_.path();
  bad.layout = "cuda";
  EXPECT_EQ(resident_publish(bad).status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace hearth
