#include "common/half.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <bit>
#include <cmath>

namespace hearth {
namespace {

// The hardware conversions (F16C) are the oracle; this test is compiled with -mf16c and
// skipped on machines without it.
bool have_f16c() { return __builtin_cpu_supports("f16c"); }

TEST(HalfTest, Fp16ToF32IsExactForEveryValue) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float want = _cvtsh_ss(static_cast<uint16_t>(h));
    const float got = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got)) << h;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << h;
    }
  }
}

TEST(HalfTest, F32ToFp16RoundsLikeTheHardware) {
  if (!have_f16c()) GTEST_SKIP() << "no F16C on this CPU";
  // Every fp16 value, the midpoints between neighbours and points just around them.
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(a)) continue;
    const uint32_t bits = std::bit_cast<uint32_t>(a);
    for (int64_t delta : {-4097, -4096, -4095, -1, 0, 1, 4095, 4096, 4097}) {
      const auto probe = std::bit_cast<float>(static_cast<uint32_t>(static_cast<int64_t>(bits) + delta));
      if (std::isnan(probe)) continue;
      const uint16_t want = _cvtss_sh(probe, _MM_FROUND_TO_NEAREST_INT);
      ASSERT_EQ(f32_to_fp16(probe), want) << probe;
    }
  }
  EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-1e10f), 0xfc00);
  EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(NAN))));
}

TEST(HalfTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: stays even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie: rounds to even
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

}  // namespace
}  // namespace hearth
