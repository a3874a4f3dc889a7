#include "ipc/segment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "common/process.h"
#include "ipc/weights_layout.h"
#include "tests/test_util.h"

namespace hearth {
namespace {

using testing::TempDir;

TEST(SegmentTest, CreateOwnsUntilPublished) {
  TempDir dir;
  const auto path = segment_path(dir.path(), "unit", "weights");
  EXPECT_EQ(path.filename(), "hearth.unit.weights");
  {
    auto seg = ShmSegment::create(path, 8192);
    ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
    EXPECT_EQ(seg->size(), 8192u);
    std::memset(seg->data(), 7, 8192);
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "segments are private to their user";
    EXPECT_EQ(ShmSegment::create(path, 8192).status().code(), ErrorCode::kInvalidArgument) << "no second creator";
  }
  EXPECT_FALSE(std::filesystem::exists(path)) << "an unpublished segment is removed";
  {
    auto seg = ShmSegment::create(path, 4096);
    ASSERT_TRUE(seg.is_ok());
    std::memset(seg->data(), 9, 4096);
    seg->publish();
  }
  ASSERT_TRUE(std::filesystem::exists(path));
  auto ro = ShmSegment::attach(path, false);
  ASSERT_TRUE(ro.is_ok());
  EXPECT_EQ(static_cast<int>(ro->data()[100]), 9);
  // A moved-from segment owns nothing; the moved-to one keeps the mapping.
  ShmSegment moved = std::move(ro).value();
  EXPECT_EQ(static_cast<int>(moved.data()[4095]), 9);
  EXPECT_EQ(ShmSegment::attach(dir.path() / "nope", false).status().code(), ErrorCode::kNotFound);
}

// Bytes of the mapping that starts at `address` that the page tables map with 2 MiB
// entries, from /proc/self/smaps.
uint64_t huge_mapped_bytes(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const std::string start = fmt::format("{:x}-", reinterpret_cast<uintptr_t>(address));
  std::string line;
  bool inside = false;
  uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    const bool header = line.find('-') < line.find(' ') && line.find(':') > line.find(' ');
    if (header) {
      if (inside) break;
      inside = line.starts_with(start);
    } else if (inside && (line.starts_with("ShmemPmdMapped:") || line.starts_with("FilePmdMapped:"))) {
      kib += std::stoull(line.substr(line.find(':') + 1));
    }
  }
  return kib << 10;
}

TEST(SegmentTest, EveryMappingStartsOnATwoMiBBoundary) {
  TempDir dir;
  const auto path = dir.path() / "aligned";
  auto seg = ShmSegment::create(path, 3 * kHugePageBytes + 4096);
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  seg->data()[seg->size() - 1] = std::byte{5};
  for (int i = 0; i < 3; ++i) {
    auto ro = ShmSegment::attach(path, false);
    ASSERT_TRUE(ro.is_ok());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ro->data()) % kHugePageBytes, 0u);
    EXPECT_EQ(ro->size(), 3 * kHugePageBytes + 4096);
    EXPECT_EQ(ro->data()[ro->size() - 1], std::byte{5});
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(seg->data()) % kHugePageBytes, 0u);
  EXPECT_EQ(seg->huge_bytes(), 0u) << "huge pages only when asked for";
}

TEST(SegmentTest, HugePagesHoldEveryWholeTwoMiBForEveryProcessThatMapsThem) {
  TempDir dir("/dev/shm");
  const auto path = dir.path() / "huge";
  const uint64_t bytes = 3 * kHugePageBytes + 4096;
  auto seg = ShmSegment::create(path, bytes, /*huge_pages=*/true);
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  if (seg->huge_error() == EINVAL || seg->huge_error() == ENOMEM) {
    GTEST_SKIP() << "the kernel gave /dev/shm no huge pages: " << std::strerror(seg->huge_error());
  }
  EXPECT_EQ(seg->huge_error(), 0) << std::strerror(seg->huge_error());
  EXPECT_EQ(seg->huge_bytes(), 3 * kHugePageBytes) << "the 4 KiB tail stays small";
  for (uint64_t i = 0; i < bytes; i += 4096) seg->data()[i] = static_cast<std::byte>(i >> 12);
  seg->publish();
  // A reader maps the same pages with 2 MiB entries, without asking.
  auto ro = ShmSegment::attach(path, false);
  ASSERT_TRUE(ro.is_ok());
  for (uint64_t i = 0; i < bytes; i += 4096) ASSERT_EQ(ro->data()[i], static_cast<std::byte>(i >> 12)) << i;
  EXPECT_EQ(huge_mapped_bytes(ro->data()), 3 * kHugePageBytes);
  std::filesystem::remove(path);
}

TEST(SegmentTest, NamesAndSpace) {
  EXPECT_TRUE(instance_name_check("default").is_ok());
  EXPECT_TRUE(instance_name_check("a-b_9").is_ok());
  EXPECT_FALSE(instance_name_check("").is_ok());
  EXPECT_FALSE(instance_name_check("../etc").is_ok());
  EXPECT_FALSE(instance_name_check("a b").is_ok());
  EXPECT_FALSE(instance_name_check(std::string(65, 'a')).is_ok());
  TempDir dir;
  auto space = shm_space(dir.path());
  ASSERT_TRUE(space.is_ok());
  EXPECT_GT(space->total_bytes, 0u);
  EXPECT_EQ(human_bytes(3u << 20), "3.0 MiB");
  EXPECT_EQ(human_bytes(1536ull << 20), "1.5 GiB");
}

TEST(ProcessTest, LivenessAndMappings) {
  EXPECT_TRUE(process_alive(::getpid()));
  EXPECT_TRUE(process_alive(::getpid(), process_start_time(::getpid())));
  EXPECT_FALSE(process_alive(::getpid(), process_start_time(::getpid()) + 1)) << "a reused pid is not the same process";
  EXPECT_FALSE(process_alive(4194000));
  TempDir dir;
  const auto path = dir.path() / "mapped";
  auto seg = ShmSegment::create(path, 4096);
  ASSERT_TRUE(seg.is_ok());
  const auto pids = processes_mapping(path);
  EXPECT_NE(std::find(pids.begin(), pids.end(), ::getpid()), pids.end());
}

TEST(WeightsLayoutTest, FingerprintAndStates) {
  EXPECT_EQ((Fingerprint{1, 2}).hex(), "00000000000000010000000000000002");
  EXPECT_EQ(segment_state_name(static_cast<uint32_t>(SegmentState::kReady)), "READY");
  EXPECT_EQ(segment_state_name(99), "INVALID");
}

}  // namespace
}  // namespace hearth
