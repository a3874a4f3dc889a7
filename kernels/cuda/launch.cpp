#include "kernels/cuda/launch.h"

#include <algorithm>

namespace hearth::kernels::cuda {
namespace {

uint32_t clamp_u32(int64_t v, uint32_t hi) { return static_cast<uint32_t>(std::clamp<int64_t>(v, 1, hi)); }

}  // namespace

DeviceLimits device_limits(int32_t cc) {
  DeviceLimits l;
  if (cc < 80) return l;
  l.compute_capability = cc;
  l.max_threads_per_block = 1024;
  l.max_block_x = 1024;
  l.max_block_y = 1024;
  l.max_block_z = 64;
  l.max_grid_x = 0x7fffffffu;
  l.max_grid_y = 65535;
  l.max_grid_z = 65535;
  l.shared_per_block = 48u << 10;
  if (cc >= 90) {
    l.shared_per_block_optin = 227u << 10;  // sm_90
  } else if (cc == 80 || cc == 87) {
    l.shared_per_block_optin = 163u << 10;  // sm_80, sm_87
  } else {
    l.shared_per_block_optin = 99u << 10;  // sm_86, sm_89
  }
  return l;
}

const char* launch_misfit(const LaunchShape& s, const DeviceLimits& l) {
  if (l.compute_capability == 0) return "an architecture below sm_80";
  if (s.grid.x == 0 || s.grid.y == 0 || s.grid.z == 0) return "an empty grid";
  if (s.block.x == 0 || s.block.y == 0 || s.block.z == 0) return "an empty block";
  if (s.grid.x > l.max_grid_x || s.grid.y > l.max_grid_y || s.grid.z > l.max_grid_z) return "a grid too large";
  if (s.block.x > l.max_block_x || s.block.y > l.max_block_y || s.block.z > l.max_block_z) return "a block too large";
  if (static_cast<uint64_t>(s.block.x) * s.block.y * s.block.z > l.max_threads_per_block) {
    return "too many threads per block";
  }
  if (s.shared_bytes > l.shared_per_block) return "more shared memory than a block gets without opting in";
  return nullptr;
}

LaunchShape elementwise_launch(int64_t n) {
  LaunchShape s;
  s.block.x = kElementwiseBlock;
  s.grid.x = clamp_u32((n + kElementwiseBlock - 1) / kElementwiseBlock, kElementwiseMaxBlocks);
  return s;
}

LaunchShape rows_launch(int64_t n_rows) {
  LaunchShape s;
  s.block.x = kRowBlock;
  s.grid.x = clamp_u32(n_rows, 0x7fffffffu);
  return s;
}

LaunchShape matvec_launch(int64_t rows, int64_t n_tokens, int32_t tokens_per_warp) {
  LaunchShape s;
  s.block.x = 32 * kMatvecWarps;
  s.grid.x = clamp_u32((rows + kMatvecWarps - 1) / kMatvecWarps, 0x7fffffffu);
  s.grid.y = clamp_u32((n_tokens + tokens_per_warp - 1) / tokens_per_warp, kMaxGridY);
  return s;
}

LaunchShape group_quant_launch(int64_t rows, int64_t n_tokens) {
  LaunchShape s;
  s.block.x = kGroupQuantBlock;
  s.grid.x = clamp_u32((rows + kGroupQuantBlock - 1) / kGroupQuantBlock, 0x7fffffffu);
  s.grid.y = clamp_u32((n_tokens + kGroupQuantTokens - 1) / kGroupQuantTokens, kMaxGridY);
  s.shared_bytes = kGroupQuantTokens * kGroupQuantTileCols * sizeof(float);
  return s;
}

int32_t matvec_splits(int64_t rows, int64_t n_tokens, int64_t cols, int32_t sm_count) {
  if (sm_count <= 0 || rows <= 0 || n_tokens <= 0) return 1;
  const int64_t blocks = (rows + kMatvecWarps - 1) / kMatvecWarps * ((n_tokens + kMatvecTokens - 1) / kMatvecTokens);
  const int64_t want = static_cast<int64_t>(sm_count) * kMatvecBlocksPerSm;
  if (2 * blocks >= want) return 1;
  int64_t splits = (want + blocks - 1) / blocks;
  splits = std::min<int64_t>({splits, cols / kMatvecSplitMinCols, kMatvecMaxSplits});
  return splits < 2 ? 1 : static_cast<int32_t>(splits);
}

int64_t matvec_split_cols(int64_t cols, int32_t splits) {
  const int64_t per = (cols + splits - 1) / splits;
  return (per + 31) / 32 * 32;
}

LaunchShape quant_mma_launch(int64_t rows, int64_t n_tokens) {
  LaunchShape s;
  s.block.x = 32 * kQuantMmaWarps;
  s.grid.x = clamp_u32((rows + kQuantMmaRows - 1) / kQuantMmaRows, 0x7fffffffu);
  s.grid.y = clamp_u32((n_tokens + kQuantMmaTokens - 1) / kQuantMmaTokens, kMaxGridY);
  return s;
}

LaunchShape act_quant_launch(int64_t n_tokens, int64_t cols) {
  LaunchShape s;
  s.block.x = 32 * kMatvecWarps;  // a warp per block of 32 values
  s.grid.x = clamp_u32((n_tokens * (cols / 32) + kMatvecWarps - 1) / kMatvecWarps, 0x7fffffffu);
  return s;
}

uint32_t attention_shared_bytes(int32_t head_dim) {
  // The query row, a tile of scores, and 32 floats for block reductions.
  return static_cast<uint32_t>((head_dim + kAttentionBlock + 32) * sizeof(float));
}

LaunchShape attention_launch(int64_t n_tokens, int32_t n_heads, int32_t head_dim, int32_t splits) {
  LaunchShape s;
  s.block.x = kAttentionBlock;
  s.grid.x = clamp_u32(n_tokens, 0x7fffffffu);
  s.grid.y = clamp_u32(n_heads, kMaxGridY);
  s.grid.z = clamp_u32(splits, kAttentionMaxSplits);
  s.shared_bytes = attention_shared_bytes(head_dim);
  return s;
}

int32_t attention_splits(int64_t n_tokens, int32_t n_heads, int32_t max_keys, int32_t sm_count) {
  const int64_t blocks = n_tokens * n_heads;
  const int64_t want = 2 * static_cast<int64_t>(sm_count);
  if (blocks <= 0 || blocks >= want || max_keys < 2 * kAttentionSplitMinKeys) return 1;
  const int64_t by_blocks = (want + blocks - 1) / blocks;
  const int64_t by_keys = max_keys / kAttentionSplitMinKeys;
  return static_cast<int32_t>(std::min<int64_t>({by_blocks, by_keys, kAttentionMaxSplits}));
}

size_t attention_scratch_bytes(int64_t n_tokens, int32_t n_heads, int32_t head_dim, int32_t splits) {
  return static_cast<size_t>(n_tokens) * static_cast<size_t>(n_heads) * static_cast<size_t>(splits) *
         (static_cast<size_t>(head_dim) + 2) * sizeof(float);
}

LaunchShape attention_merge_launch(int64_t n_tokens, int32_t n_heads, int32_t head_dim) {
  LaunchShape s;
  s.block.x = clamp_u32((head_dim + 31) / 32 * 32, 1024);
  s.grid.x = clamp_u32(n_tokens, 0x7fffffffu);
  s.grid.y = clamp_u32(n_heads, kMaxGridY);
  return s;
}

}  // namespace hearth::kernels::cuda
