// The CUDA kernels' launch geometry (kernels/cuda/launch.h) against the limits of the
// architectures the build targets, on ragged and extreme shapes: every launch fits, and
// with the kernels' grid-stride loops covers its work.
#include "kernels/cuda/launch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace hearth::kernels::cuda {
namespace {

const std::vector<int32_t> kTargets = {80, 86, 89, 90};
const std::vector<int64_t> kSizes = {1, 2, 31, 32, 33, 255, 256, 257, 4095, 65535, 65536, 1 << 20, int64_t{1} << 33};

void expect_fits(const LaunchShape& s, const char* what, int64_t size) {
  for (int32_t cc : kTargets) {
    const char* misfit = launch_misfit(s, device_limits(cc));
    EXPECT_EQ(misfit, nullptr) << what << " of " << size << " on sm_" << cc << ": " << misfit;
  }
}

TEST(LaunchTest, LimitsOfTheTargetedArchitectures) {
  EXPECT_EQ(device_limits(90).shared_per_block_optin, 227u << 10);
  EXPECT_EQ(device_limits(80).shared_per_block_optin, 163u << 10);
  EXPECT_EQ(device_limits(86).shared_per_block_optin, 99u << 10);
  for (int32_t cc : kTargets) {
    const DeviceLimits l = device_limits(cc);
    EXPECT_EQ(l.compute_capability, cc);
    EXPECT_EQ(l.max_threads_per_block, 1024u);
    EXPECT_EQ(l.max_grid_y, 65535u);
    EXPECT_EQ(l.shared_per_block, 48u << 10);
  }
  EXPECT_EQ(device_limits(75).compute_capability, 0) << "below sm_80: not a target";
  EXPECT_NE(launch_misfit(elementwise_launch(1), device_limits(75)), nullptr);
}

TEST(LaunchTest, MisfitsAreNamed) {
  const DeviceLimits l = device_limits(90);
  LaunchShape s;
  s.block.x = 2048;
  EXPECT_STREQ(launch_misfit(s, l), "a block too large");
  s.block.x = 512;
  s.block.y = 4;
  EXPECT_STREQ(launch_misfit(s, l), "too many threads per block");
  s.block.y = 1;
  s.grid.y = 70000;
  EXPECT_STREQ(launch_misfit(s, l), "a grid too large");
  s.grid.y = 1;
  s.shared_bytes = 49u << 10;
  EXPECT_NE(launch_misfit(s, l), nullptr);
  s.shared_bytes = 0;
  s.grid.x = 0;
  EXPECT_STREQ(launch_misfit(s, l), "an empty grid");
}

TEST(LaunchTest, EveryShapeGetsALaunchThatFits) {
  for (int64_t n : kSizes) {
    expect_fits(elementwise_launch(n), "elementwise", n);
    expect_fits(rows_launch(n), "rows", n);
    const LaunchShape e = elementwise_launch(n);
    EXPECT_GE(static_cast<int64_t>(e.grid.x) * e.block.x, std::min<int64_t>(n, int64_t{kElementwiseMaxBlocks} * kElementwiseBlock));
    for (int64_t tokens : {int64_t{1}, int64_t{7}, int64_t{512}, int64_t{70000}}) {
      const LaunchShape m = matvec_launch(n, tokens);
      expect_fits(m, "matvec", n);
      EXPECT_EQ(m.block.x, 32 * kMatvecWarps);
      EXPECT_GE(static_cast<int64_t>(m.grid.x) * kMatvecWarps, std::min<int64_t>(n, 0x7fffffffLL)) << "a warp per row";
      EXPECT_EQ(m.grid.y, static_cast<uint32_t>(std::min<int64_t>(tokens, kMaxGridY)));
      const LaunchShape grouped = matvec_launch(n, tokens, kMatvecTokens);
      expect_fits(grouped, "matvec of token groups", n);
      EXPECT_EQ(grouped.grid.x, m.grid.x);
      EXPECT_EQ(grouped.grid.y,
                static_cast<uint32_t>(std::min<int64_t>((tokens + kMatvecTokens - 1) / kMatvecTokens, kMaxGridY)));
      expect_fits(act_quant_launch(tokens, 32 * (n % 4096 + 1)), "act_quant", n);
      const LaunchShape q = quant_mma_launch(n, tokens);
      expect_fits(q, "quant_mma", n);
      EXPECT_EQ(q.block.x, 32 * kQuantMmaWarps);
      EXPECT_GE(static_cast<int64_t>(q.grid.x) * kQuantMmaRows, std::min<int64_t>(n, 0x7fffffffLL)) << "a tile per 64 rows";
      EXPECT_EQ(q.grid.y, static_cast<uint32_t>(std::min<int64_t>((tokens + kQuantMmaTokens - 1) / kQuantMmaTokens,
                                                                  kMaxGridY)));
      const LaunchShape g = group_quant_launch(n, tokens);
      expect_fits(g, "group_quant", n);
      EXPECT_GE(static_cast<int64_t>(g.grid.x) * g.block.x, std::min<int64_t>(n, 0x7fffffffLL)) << "a thread per row";
      EXPECT_EQ(g.grid.y, static_cast<uint32_t>(std::min<int64_t>((tokens + kGroupQuantTokens - 1) / kGroupQuantTokens,
                                                                  kMaxGridY)));
    }
  }
}

TEST(LaunchTest, StreamingProductsSplitOnlyWhereTheirRowsLeaveTheDeviceIdle) {
  EXPECT_EQ(matvec_splits(1024, 1, 4096, 0), 1) << "no SM count: no split";
  EXPECT_EQ(matvec_splits(1024, 1, 4096, 132), 4) << "256 blocks on 132 SMs: four ranges of 1024 columns";
  EXPECT_EQ(matvec_splits(512, 1, 2048, 132), 2);
  EXPECT_EQ(matvec_splits(4096, 1, 4096, 132), 1) << "1024 blocks: nearly 8 an SM already";
  EXPECT_EQ(matvec_splits(1024, 1, 1500, 132), 1) << "one range's worth of columns";
  EXPECT_EQ(matvec_splits(1, 1, 1 << 20, 132), kMatvecMaxSplits);
  EXPECT_EQ(matvec_splits(1024, 64, 4096, 132), 1) << "64 tokens: 8 groups of blocks";
  for (int64_t rows : {int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1024}}) {
    for (int64_t cols : {int64_t{32}, int64_t{1024}, int64_t{2048}, int64_t{3104}, int64_t{14336}, int64_t{1} << 20}) {
      for (int32_t sm : {1, 8, 132, 1000}) {
        const int32_t splits = matvec_splits(rows, 1, cols, sm);
        ASSERT_GE(splits, 1);
        ASSERT_LE(splits, kMatvecMaxSplits);
        if (splits == 1) continue;
        const int64_t per = matvec_split_cols(cols, splits);
        EXPECT_EQ(per % 32, 0);
        EXPECT_GE(per * splits, cols) << "the ranges cover the columns";
        EXPECT_LT(per * (splits - 1), cols) << "and none is empty";
        EXPECT_GE(cols - per * (splits - 1), 1);
      }
    }
  }
}

TEST(LaunchTest, AttentionFitsEveryHeadDimWithoutOptingIn) {
  for (int32_t head_dim = 2; head_dim <= kAttentionMaxHeadDim; head_dim += 2) {
    for (int32_t heads : {1, 7, 32, 128, 70000}) {
      const LaunchShape s = attention_launch(4097, heads, head_dim);
      expect_fits(s, "attention", head_dim);
      EXPECT_EQ(s.block.x, kAttentionBlock);
      EXPECT_EQ(s.shared_bytes, attention_shared_bytes(head_dim));
      EXPECT_GE(s.shared_bytes, (head_dim + kAttentionBlock) * sizeof(float)) << "q and a tile of scores";
    }
  }
  EXPECT_EQ(kAttentionBlock % 32, 0u) << "block reductions need whole warps";
  EXPECT_EQ(kRowBlock % 32, 0u);
}

// Split attention (flash-decoding): splits only where (token, head) pairs leave an H100's
// 132 SMs short of two blocks each and the context has the keys, as many ranges as fill
// them, never ranges under kAttentionSplitMinKeys keys or more than kAttentionMaxSplits;
// every split launch and its merge fit.
TEST(LaunchTest, AttentionSplitsOnlyWhereTheDeviceWouldIdle) {
  constexpr int32_t kSms = 132;
  EXPECT_EQ(attention_splits(1, 32, 100000, kSms), 9) << "batch 1, 32 heads: 264 blocks wanted";
  EXPECT_EQ(attention_splits(1, 8, 100000, kSms), 33);
  EXPECT_EQ(attention_splits(1, 1, 1 << 30, kSms), static_cast<int32_t>(kAttentionMaxSplits));
  EXPECT_EQ(attention_splits(1, 8, 4 * kAttentionSplitMinKeys, kSms), 4) << "no range under the minimum";
  EXPECT_EQ(attention_splits(1, 32, 2 * kAttentionSplitMinKeys - 1, kSms), 1) << "a short context";
  EXPECT_EQ(attention_splits(64, 32, 100000, kSms), 1) << "batch 64 fills the device";
  EXPECT_EQ(attention_splits(9, 32, 100000, kSms), 1);
  EXPECT_EQ(attention_splits(8, 32, 100000, kSms), 2);
  EXPECT_EQ(attention_splits(4, 32, 0, kSms), 1) << "an unknown context";
  EXPECT_EQ(attention_splits(0, 32, 100000, kSms), 1);
  EXPECT_EQ(attention_splits(1, 32, 100000, 0), 1) << "an unknown SM count";
  for (int32_t sms : {1, 14, 108, 132, 170}) {
    for (int64_t tokens : {1, 2, 5, 64, 4097}) {
      for (int32_t heads : {1, 8, 32, 64}) {
        for (int32_t keys : {0, 1, 700, 1024, 5000, 131072}) {
          const int32_t splits = attention_splits(tokens, heads, keys, sms);
          ASSERT_GE(splits, 1);
          ASSERT_LE(splits, static_cast<int32_t>(kAttentionMaxSplits));
          if (splits > 1) {
            ASSERT_GE(keys / splits, kAttentionSplitMinKeys) << keys << " keys in " << splits;
            ASSERT_LT(tokens * heads * (splits - 1), 2 * sms) << "one range fewer would still fill the device";
          }
          expect_fits(attention_launch(tokens, heads, 128, splits), "split attention", splits);
          const LaunchShape m = attention_merge_launch(tokens, heads, 128);
          expect_fits(m, "attention merge", tokens);
          ASSERT_GE(m.block.x, 128u) << "a thread per output dimension";
          ASSERT_EQ(attention_scratch_bytes(tokens, heads, 128, splits),
                    static_cast<size_t>(tokens * heads * splits) * 130 * sizeof(float));
        }
      }
    }
  }
  for (int32_t head_dim = 2; head_dim <= kAttentionMaxHeadDim; head_dim += 2) {
    expect_fits(attention_merge_launch(3, 70000, head_dim), "attention merge", head_dim);
    EXPECT_GE(attention_merge_launch(3, 7, head_dim).block.x, static_cast<uint32_t>(head_dim));
  }
}

}  // namespace
}  // namespace hearth::kernels::cuda
