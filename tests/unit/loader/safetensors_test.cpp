#include "loader/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/mapped_file.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

std::string make_file(const std::string& header, size_t data_bytes) {
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  out += header;
  out += std::string(data_bytes, '\x01');
  return out;
}

Result<SafetensorsFile> parse(const std::string& bytes) {
  return safetensors_parse({reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()}, "test.safetensors");
}

TEST(SafetensorsTest, ParsesTheRealStoriesFile) {
  const auto path = testing::shared_path("models/stories260K-hf/model.safetensors");
  HEARTH_REQUIRE_SHARED(path);
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.is_ok());
  auto st = parse(std::string(reinterpret_cast<const char*>(file->data()), file->size()));
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  bool found = false;
  for (const auto& t : st->tensors) {
    if (t.name == "model.embed_tokens.weight") {
      found = true;
      EXPECT_EQ(t.shape[0], 512);
      EXPECT_EQ(t.shape[1], 64);
      EXPECT_EQ(t.dtype, DType::kF32);
    }
  }
  EXPECT_TRUE(found);
}

TEST(SafetensorsTest, ParsesAValidHeader) {
  auto st = parse(make_file(
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]},)"
      R"("b":{"dtype":"BF16","shape":[],"data_offsets":[12,14]}})",
      14));
  ASSERT_TRUE(st.is_ok()) << st.status().to_string();
  ASSERT_EQ(st->tensors.size(), 2u);
}

TEST(SafetensorsTest, RefusesHostileHeaders) {
  struct Case {
    std::string bytes;
    ErrorCode code;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"short", ErrorCode::kFormat, "too short"},
      {make_file("{", 0), ErrorCode::kFormat, "JSON"},
      {make_file("[1]", 0), ErrorCode::kFormat, "object"},
      {make_file(R"({"a":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})", 2), ErrorCode::kUnsupported, "I8"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), ErrorCode::kFormat, "a"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4), ErrorCode::kFormat, "truncated"},
      {make_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), ErrorCode::kFormat, "dimension"},
      {make_file(R"({"a":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", 8), ErrorCode::kFormat,
       "dimensions"},
      {make_file(R"({"a":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,8]}})", 8),
       ErrorCode::kFormat, ""},
      {make_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],)"
                 R"("data_offsets":[4,12]}})",
                 12),
       ErrorCode::kFormat, "overlap"},
      {make_file(R"({"a":{"dtype":"F32","shape":[2]}})", 8), ErrorCode::kFormat, "data_offsets"},
      {make_file(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8), ErrorCode::kFormat, "dtype"},
      {make_file(R"({"a":"x"})", 0), ErrorCode::kFormat, "not an object"},
  };
  for (const Case& c : cases) {
    auto st = parse(c.bytes);
    ASSERT_FALSE(st.is_ok()) << c.bytes;
    EXPECT_EQ(st.status().code(), c.code) << st.status().to_string();
    EXPECT_NE(st.status().message().find(c.needle), std::string::npos) << st.status().to_string();
  }
  // A header length past the end of the file.
  std::string lying = make_file("{}", 0);
  const uint64_t huge = uint64_t{1} << 60;
  std::memcpy(lying.data(), &huge, 8);
  EXPECT_FALSE(parse(lying).is_ok());
}

}  // namespace
}  // namespace hearth
