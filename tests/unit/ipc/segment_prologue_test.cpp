// The prologue every segment kind shares: written once, checked the same way, each way a
// file can be wrong refused with kFormat and a message that names the file and the fix.
#include "ipc/segment_prologue.h"

#include <gtest/gtest.h>

namespace hearth {
namespace {

constexpr SegmentKind kKind{"test", 0x1234, 3, 64, "restart the test"};

TEST(SegmentPrologueTest, WhatInitWritesChecksClean) {
  SegmentPrologue p{};
  segment_prologue_init(p, kKind, 4096);
  EXPECT_TRUE(segment_prologue_check(p, kKind, 4096, "/dev/shm/x").is_ok());
}

TEST(SegmentPrologueTest, EachWayAFileIsWrongIsRefusedNamingTheFix) {
  struct Case {
    const char* what;
    void (*spoil)(SegmentPrologue&);
    uint64_t file_bytes;
    const char* says;
  };
  const Case cases[] = {
      {"short file", [](SegmentPrologue&) {}, 63, "is truncated"},
      {"magic", [](SegmentPrologue& p) { p.magic ^= 1; }, 4096, "is not a hearth test segment"},
      {"version", [](SegmentPrologue& p) { p.layout_version = 9; }, 4096, "test layout version 9, this build uses 3: restart the test"},
      {"header size", [](SegmentPrologue& p) { p.header_bytes = 32; }, 4096, "truncated or corrupt"},
      {"total size", [](SegmentPrologue&) {}, 8192, "says it is 4096 bytes but the file is 8192"},
  };
  for (const Case& c : cases) {
    SegmentPrologue p{};
    segment_prologue_init(p, kKind, 4096);
    c.spoil(p);
    const Status st = segment_prologue_check(p, kKind, c.file_bytes, "/dev/shm/x");
    EXPECT_EQ(st.code(), ErrorCode::kFormat) << c.what;
    EXPECT_NE(st.message().find(c.says), std::string::npos) << c.what << ": " << st.message();
    EXPECT_NE(st.message().find("/dev/shm/x"), std::string::npos) << c.what;
  }
}

}  // namespace
}  // namespace hearth
