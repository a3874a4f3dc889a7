#include "ipc/segment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <string_view>

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

// Whether /proc/self/maps has a PROT_NONE mapping that ends where `begin` starts or starts
// where `end` ends: what a reservation's unreturned slack would look like.
bool prot_none_beside(const void* begin, const void* end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const auto b = reinterpret_cast<uintptr_t>(begin), e = reinterpret_cast<uintptr_t>(end);
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) != 3) continue;
    if (std::string_view(perms) == "---p" && (hi == b || lo == e)) return true;
  }
  return false;
}

TEST(SegmentTest, EveryMappingStartsOnATwoMiBBoundary) {
  TempDir dir("/dev/shm");  // where the kernel would not align a mapping by itself
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
    EXPECT_FALSE(prot_none_beside(ro->data(), ro->data() + ro->size())) << "the reservation's slack is returned";
  }
  EXPECT_EQ(reinterpret_cast<uintptr_t>(seg->data()) % kHugePageBytes, 0u);
  EXPECT_EQ(seg->huge_bytes(), 0u) << "huge pages only when asked for";
  EXPECT_EQ(seg->why_not_huge(), "") << "nothing was asked for";
}

TEST(SegmentTest, HugePagesHoldEveryWholeTwoMiBForEveryProcessThatMapsThem) {
  TempDir dir("/dev/shm");
  const auto path = dir.path() / "huge";
  const uint64_t bytes = 3 * kHugePageBytes + 4096;
  auto seg = ShmSegment::create(path, bytes, HugePagePlan{});
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  const int err = seg->huge_error();
  if (seg->huge_bytes() == 0 && (err == EINVAL || err == ENOMEM || err == EBUSY || err == EAGAIN)) {
    GTEST_SKIP() << "the kernel gave /dev/shm no huge pages now: " << std::strerror(err);
  }
  EXPECT_EQ(err, 0) << std::strerror(err);
  EXPECT_EQ(seg->why_not_huge(), "");
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

// Front to back, or the same part of every run first (the low KV blocks of every layer),
// then the rest; each page once.
TEST(SegmentTest, HugePagesGoInThePlansOrder) {
  constexpr uint64_t M = kHugePageBytes / 2;  // 1 MiB
  std::vector<uint64_t> front_to_back;
  for (uint64_t p = 0; p < 5; ++p) front_to_back.push_back(p * kHugePageBytes);
  EXPECT_EQ(huge_page_order(5 * kHugePageBytes + 4096, HugePagePlan{}), front_to_back);
  // Runs of 3 MiB from 1 MiB on: they start at 1, 4, 7, 10 and 13 MiB (pages 0, 2, 3, 5,
  // 6); 2 MiB further in are 3, 6, 9, 12, 15 MiB (pages 1, 3, 4, 6, 7).
  const auto order = huge_page_order(16 * M, HugePagePlan{.origin = M, .stride = 3 * M});
  const std::vector<uint64_t> pages = {0, 2, 3, 5, 6, 1, 4, 7};
  ASSERT_EQ(order.size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_EQ(order[i], pages[i] * kHugePageBytes) << i;
  // What no run holds comes last: a 5 MiB header, then runs of 4 MiB.
  const auto late = huge_page_order(14 * M, HugePagePlan{.origin = 5 * M, .stride = 4 * M});
  const std::vector<uint64_t> late_pages = {2, 4, 6, 3, 5, 0, 1};  // runs at 5, 9, 13 MiB
  ASSERT_EQ(late.size(), late_pages.size());
  for (size_t i = 0; i < late_pages.size(); ++i) EXPECT_EQ(late[i], late_pages[i] * kHugePageBytes) << i;
}

// Placing pages stops when its time is up; the rest of the segment is there, on 4 KiB pages.
TEST(SegmentTest, HugePagesStopWhenTheirTimeIsUp) {
  TempDir dir("/dev/shm");
  const auto path = dir.path() / "late";
  auto seg = ShmSegment::create(path, 3 * kHugePageBytes, HugePagePlan{.budget = std::chrono::milliseconds(0)});
  ASSERT_TRUE(seg.is_ok()) << seg.status().to_string();
  EXPECT_EQ(seg->huge_bytes(), 0u);
  EXPECT_THAT(seg->why_not_huge(), ::testing::HasSubstr("took over the 0 ms allowed"));
  for (uint64_t i = 0; i < seg->size(); i += 4096) seg->data()[i] = std::byte{1};
  EXPECT_EQ(huge_mapped_bytes(seg->data()), 0u);
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
