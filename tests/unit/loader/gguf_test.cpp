#include "loader/gguf.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/mapped_file.h"
#include "loader/gguf_writer.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

GgufWriter small_file() {
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_u32("llama.block_count", 2);
  w.add_f32("llama.rope.freq_base", 500000.0f);
  w.add_bool("tokenizer.ggml.add_bos_token", true);
  const std::vector<std::string> tokens = {"<unk>", "<s>", "a"};
  w.add_strings("tokenizer.ggml.tokens", tokens);
  const std::vector<float> scores = {0.0f, 0.0f, -1.5f};
  w.add_f32s("tokenizer.ggml.scores", scores);
  std::vector<float> t(2 * 3, 1.5f);
  const int64_t shape[] = {2, 3};
  EXPECT_TRUE(w.add_tensor("w", DType::kF32, shape, std::as_bytes(std::span(t))).is_ok());
  return w;
}

TEST(GgufTest, ParsesTheRealStoriesFile) {
  const auto path = testing::shared_path("models/stories260K/stories260K.gguf");
  HEARTH_REQUIRE_SHARED(path);
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.is_ok());
  auto g = gguf_parse(file->bytes());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->version, 3u);
  EXPECT_EQ(**g->get_string("general.architecture"), "llama");
  EXPECT_EQ(**g->get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strings.size(), 512u);
  EXPECT_EQ(g->find("tokenizer.ggml.scores")->floats.size(), 512u);
  bool found = false;
  for (const TensorView& t : g->tensors) {
    if (t.name == "blk.0.attn_q.weight") {
      found = true;
      EXPECT_EQ(t.dtype, DType::kF32);
      EXPECT_EQ(t.shape[0], 64);
      EXPECT_EQ(t.shape[1], 64);
    }
  }
  EXPECT_TRUE(found);
}

TEST(GgufTest, WriterOutputParsesBack) {
  const std::string bytes = small_file().bytes();
  auto g = gguf_parse(as_bytes(bytes));
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(**g->get_uint("llama.block_count"), 2u);
  EXPECT_FLOAT_EQ(static_cast<float>(**g->get_float("llama.rope.freq_base")), 500000.0f);
  EXPECT_TRUE(**g->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(g->find("tokenizer.ggml.tokens")->strings[2], "a");
  ASSERT_EQ(g->tensors.size(), 1u);
  EXPECT_EQ(g->tensors[0].shape[0], 2);
  EXPECT_EQ(g->tensors[0].shape[1], 3);
  float v;
  std::memcpy(&v, g->tensors[0].data, 4);
  EXPECT_EQ(v, 1.5f);
  EXPECT_FALSE(g->get_string("llama.block_count").is_ok()) << "wrong type is an error";
}

// Patches bytes at `offset` of a valid file and expects parsing to fail with `code`.
void expect_refused(std::string bytes, ErrorCode code, std::string_view needle = "") {
  auto g = gguf_parse(as_bytes(bytes));
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), code) << g.status().to_string();
  if (!needle.empty()) {
    EXPECT_NE(g.status().message().find(needle), std::string::npos) << g.status().to_string();
  }
}

template <typename T>
std::string patched(std::string s, size_t offset, T value) {
  std::memcpy(s.data() + offset, &value, sizeof(T));
  return s;
}

TEST(GgufTest, RefusesBrokenHeaders) {
  const std::string good = small_file().bytes();
  expect_refused("GGU", ErrorCode::kFormat);
  expect_refused("XXXX" + good.substr(4), ErrorCode::kFormat, "not a GGUF");
  expect_refused(patched<uint32_t>(good, 4, 1), ErrorCode::kUnsupported, "version 1");
  expect_refused(patched<uint32_t>(good, 4, 4), ErrorCode::kUnsupported, "version 4");
  // Version 2 has version 3's layout (3 only allows big-endian files): it parses.
  const std::string v2_bytes = patched<uint32_t>(good, 4, 2);
  auto v2 = gguf_parse(as_bytes(v2_bytes));
  ASSERT_TRUE(v2.is_ok()) << v2.status().to_string();
  EXPECT_EQ(v2->version, 2u);
  expect_refused(patched<uint64_t>(good, 8, uint64_t{1} << 40), ErrorCode::kFormat, "tensors");
  expect_refused(patched<uint64_t>(good, 16, uint64_t{1} << 40), ErrorCode::kFormat, "metadata");
  // The first key's length made huge.
  expect_refused(patched<uint64_t>(good, 24, uint64_t{1} << 50), ErrorCode::kFormat);
  // Every cut short of the tensor's last byte (the final 8 bytes are alignment padding).
  for (size_t cut = 0; cut < good.size() - 8; cut += 7) {
    auto g = gguf_parse(as_bytes(good.substr(0, cut)));
    EXPECT_FALSE(g.is_ok()) << "a file cut at " << cut << " bytes must be refused";
  }
}

TEST(GgufTest, RefusesHostileTensorDescriptors) {
  const int64_t shape[] = {2, 3};
  std::vector<float> data(6, 0.0f);
  auto with_tensor = [&](auto edit) {
    GgufWriter w;
    w.add_string("general.architecture", "llama");
    EXPECT_TRUE(w.add_tensor("t", DType::kF32, shape, std::as_bytes(std::span(data))).is_ok());
    std::string b = w.bytes();
    const size_t name_at = b.find("\x01\x00\x00\x00\x00\x00\x00\x00t", 0, 9);  // u64 length 1, "t"
    edit(b, name_at + 9);
    return b;
  };
  // Layout after the name: n_dims u32, ne0 u64, ne1 u64, type u32, offset u64.
  expect_refused(with_tensor([](std::string& b, size_t at) { std::memcpy(b.data() + at, "\x05\0\0\0", 4); }),
                 ErrorCode::kFormat, "dimensions");
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint64_t zero = 0;
                   std::memcpy(b.data() + at + 4, &zero, 8);
                 }),
                 ErrorCode::kFormat, "dimension");
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint32_t q4k = 12;
                   std::memcpy(b.data() + at + 20, &q4k, 4);
                 }),
                 ErrorCode::kUnsupported, "Q4_K");
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint64_t off = 4;
                   std::memcpy(b.data() + at + 24, &off, 8);
                 }),
                 ErrorCode::kFormat, "aligned");
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint64_t off = uint64_t{1} << 40;
                   std::memcpy(b.data() + at + 24, &off, 8);
                 }),
                 ErrorCode::kFormat, "past the end");
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint64_t huge = uint64_t{1} << 39;
                   std::memcpy(b.data() + at + 4, &huge, 8);
                   std::memcpy(b.data() + at + 12, &huge, 8);
                 }),
                 ErrorCode::kFormat);
  expect_refused(with_tensor([](std::string& b, size_t at) {
                   uint32_t q8 = 8;  // Q8_0 rows of 3 elements: not whole blocks
                   std::memcpy(b.data() + at + 20, &q8, 4);
                 }),
                 ErrorCode::kFormat, "block");
}

TEST(GgufTest, RefusesDuplicatesAndAbsurdMetadata) {
  GgufWriter dup;
  dup.add_u32("a", 1);
  dup.add_u32("a", 2);
  expect_refused(dup.bytes(), ErrorCode::kFormat, "twice");

  // Arrays nested deeper than the parser allows: hand-encode array-of-array-of-...
  std::string deep = "GGUF";
  auto put = [&](auto v) { deep.append(reinterpret_cast<const char*>(&v), sizeof(v)); };
  put(uint32_t{3});
  put(uint64_t{0});
  put(uint64_t{1});
  put(uint64_t{1});
  deep += "k";
  put(uint32_t{9});
  for (int i = 0; i < 6; ++i) {
    put(uint32_t{9});
    put(uint64_t{1});
  }
  put(uint32_t{4});
  put(uint64_t{1});
  put(uint32_t{7});
  expect_refused(deep, ErrorCode::kFormat, "deep");

  GgufWriter bad_align;
  bad_align.add_u32("general.alignment", 3);
  expect_refused(bad_align.bytes(), ErrorCode::kFormat, "alignment");
}

TEST(GgufTest, NamesUnknownTypes) {
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(30), "BF16");
  EXPECT_EQ(ggml_type_name(999), "type 999");
}

}  // namespace
}  // namespace hearth
