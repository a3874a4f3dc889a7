#include "common/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

void write(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

TEST(MappedFileTest, MapsTheBytesAndOutlivesItsFile) {
  TempDir dir;
  const auto p = dir.path() / "f.bin";
  write(p, "weights!");
  auto m = MappedFile::open(p);
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  ASSERT_EQ(m->size(), 8u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), "weights!");
  EXPECT_EQ(m->path(), p);
  // Used in place: the mapping stays valid when the file is gone.
  std::filesystem::remove(p);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 4), "weig");
  // Moves hand the mapping over.
  MappedFile moved = std::move(m).value();
  EXPECT_EQ(moved.size(), 8u);
  MappedFile assigned;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.bytes().size(), 8u);
}

TEST(MappedFileTest, EmptyMissingAndUnreadableFiles) {
  TempDir dir;
  write(dir.path() / "empty", "");
  auto empty = MappedFile::open(dir.path() / "empty");
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(empty->size(), 0u);
  EXPECT_TRUE(empty->bytes().empty());
  auto missing = MappedFile::open(dir.path() / "absent");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(missing.status().message().find("absent"), std::string::npos) << missing.status().message();
  auto directory = MappedFile::open(dir.path());
  EXPECT_FALSE(directory.is_ok()) << "a directory is not a file to map";
}

TEST(MappedFileTest, ReadSmallFileRefusesLargeOnes) {
  TempDir dir;
  const auto p = dir.path() / "config.json";
  write(p, std::string(100, 'x'));
  EXPECT_EQ(read_small_file(p, 100).value().size(), 100u);
  auto big = read_small_file(p, 99);
  ASSERT_FALSE(big.is_ok());
  EXPECT_NE(big.status().message().find("99"), std::string::npos) << big.status().message();
  EXPECT_FALSE(read_small_file(dir.path() / "absent", 100).is_ok());
}

TEST(MappedFileTest, FileSinkAppearsOnlyWhenClosed) {
  TempDir dir;
  const auto p = dir.path() / "out.gguf";
  {
    FileSink sink(p);
    ASSERT_TRUE(sink.append("abc").is_ok());
    ASSERT_TRUE(sink.append("def").is_ok());
    EXPECT_FALSE(std::filesystem::exists(p)) << "written to a .part file until closed";
    ASSERT_TRUE(sink.close().is_ok());
  }
  EXPECT_EQ(read_small_file(p, 100).value(), "abcdef");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "out.gguf.part"));
  {
    FileSink abandoned(dir.path() / "half.gguf");
    ASSERT_TRUE(abandoned.append("abc").is_ok());
  }  // destroyed without close: nothing is left behind
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "half.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "half.gguf.part"));
  ASSERT_TRUE(write_file(p, "xyz").is_ok());
  EXPECT_EQ(read_small_file(p, 100).value(), "xyz");
  EXPECT_FALSE(write_file(dir.path() / "no-such-dir" / "f", "x").is_ok());
}

}  // namespace
}  // namespace hearth
