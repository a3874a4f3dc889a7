// Launch geometry of the CUDA kernels (kernels/cuda/*.cu): grid and block sizes and
// shared memory, computed on the host from the op's shape, and the limits of the
// architectures the build targets to check them against. Plain C++ with no CUDA
// headers, built in every configuration, so the geometry is unit-tested on machines
// without nvcc or a GPU (launch_test). The kernels loop over what a capped grid does
// not cover, so every shape of any size gets a launch that fits.
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hearth::kernels::cuda {

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct LaunchShape {
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0;  // dynamic shared memory per block
};

// What one architecture allows a launch (CUDA C++ Programming Guide, "Technical
// Specifications per Compute Capability").
struct DeviceLimits {
  int32_t compute_capability = 0;      // major * 10 + minor
  uint32_t max_threads_per_block = 0;
  uint32_t max_block_x = 0, max_block_y = 0, max_block_z = 0;
  uint32_t max_grid_x = 0, max_grid_y = 0, max_grid_z = 0;
  uint32_t shared_per_block = 0;       // without opting in
  uint32_t shared_per_block_optin = 0;
};

// The limits of compute capability `cc` (80, 86, 89, 90, ...); those of the nearest
// lower one this table knows for a newer minor; compute_capability 0 for one below 8.0,
// which the build does not target.
DeviceLimits device_limits(int32_t cc);

// Null when `shape` fits `limits` (every dimension positive and within bounds, shared
// memory within the default per-block size), else what does not.
const char* launch_misfit(const LaunchShape& shape, const DeviceLimits& limits);

// The grids' caps: a kernel's grid-stride loops cover any remainder.
inline constexpr uint32_t kMaxGridY = 65535;
inline constexpr uint32_t kElementwiseBlock = 256;
inline constexpr uint32_t kElementwiseMaxBlocks = 65535;
inline constexpr uint32_t kRowBlock = 256;       // rms_norm: one block per row
inline constexpr uint32_t kMatvecWarps = 4;      // matmul: one warp per output row
inline constexpr int32_t kMatvecTokens = 8;      // and group of up to this many tokens
// Split-K of a streaming product whose rows are too few to fill the device: ranges of
// about cols / splits columns, no more ranges than kMatvecSplitMinCols columns each would
// allow (the last range takes what is left, which may be fewer), at most kMatvecMaxSplits
// (grid.z), until each SM has kMatvecBlocksPerSm blocks; only where it would have fewer
// than half that.
inline constexpr int32_t kMatvecBlocksPerSm = 8;
inline constexpr int64_t kMatvecSplitMinCols = 1024;
inline constexpr int32_t kMatvecMaxSplits = 16;
inline constexpr uint32_t kAttentionBlock = 128;  // attention: one block per (token, head), keys a tile at a time
inline constexpr int32_t kAttentionMaxHeadDim = 256;
inline constexpr uint32_t kAttentionMaxSplits = 64;       // split attention: key ranges per (token, head), grid.z
inline constexpr int32_t kAttentionSplitMinKeys = 512;    // the fewest keys of the longest context a range gets
// Q8_0/Q4_0 products over many tokens on tensor cores (int8 mma.sync): a block of
// kQuantMmaWarps warps per tile of kQuantMmaRows rows by kQuantMmaTokens tokens,
// kQuantMmaStageBlocks blocks of 32 columns staged in shared memory at a time. From
// kQuantMmaMinTokens tokens on, the product takes this path instead of the matvec
// kernel (an estimate until a device measures the crossover: cuda_bench prints both).
inline constexpr uint32_t kQuantMmaWarps = 4;
inline constexpr int32_t kQuantMmaRows = 64;
inline constexpr int32_t kQuantMmaTokens = 64;
inline constexpr int32_t kQuantMmaStageBlocks = 4;
inline constexpr int64_t kQuantMmaMinTokens = 16;
// Group-quantized (GPTQ) products take the same tiles on tensor cores (f16 mma.sync),
// kGroupQuantMmaCols columns a stage, from kGroupQuantMmaMinTokens tokens on (an estimate
// too).
inline constexpr int32_t kGroupQuantMmaCols = 32;
inline constexpr int64_t kGroupQuantMmaMinTokens = 16;
inline constexpr uint32_t kGroupQuantBlock = 128;      // group-quantized products: a thread per output row
inline constexpr uint32_t kGroupQuantTokens = 8;       // tokens one thread accumulates at once
inline constexpr uint32_t kGroupQuantTileCols = 256;   // activation columns staged in shared memory

// n independent elements, grid-stride.
LaunchShape elementwise_launch(int64_t n);
// One block per row of [n_rows, dim] (norms, embedding lookups, row gathers).
LaunchShape rows_launch(int64_t n_rows);
// y[n_tokens, rows]: a warp per output row, blocks of kMatvecWarps rows, grid.y over
// groups of `tokens_per_warp` tokens (capped at kMaxGridY).
LaunchShape matvec_launch(int64_t rows, int64_t n_tokens, int32_t tokens_per_warp = 1);
// Into how many column ranges a streaming product (a warp per row and group of
// kMatvecTokens tokens, kMatvecWarps to a block) is split on a device of `sm_count` SMs:
// where its blocks would give each SM fewer than kMatvecBlocksPerSm / 2, enough ranges to
// give each kMatvecBlocksPerSm, as long as cols / splits stays at kMatvecSplitMinCols or
// more, at most kMatvecMaxSplits; else 1 (and 1 when sm_count is 0: not known).
int32_t matvec_splits(int64_t rows, int64_t n_tokens, int64_t cols, int32_t sm_count);
// The columns of each range of a split product: a multiple of 32 (whole Q8_0/Q4_0
// blocks, 16-byte aligned starts), the last range taking what is left.
int64_t matvec_split_cols(int64_t cols, int32_t splits);
// y[n_tokens, rows] of a group-quantized (GPTQ-layout) matrix: a thread per output row
// (consecutive rows are consecutive words of qweight, so reads coalesce), blocks of
// kGroupQuantBlock rows, grid.y over groups of kGroupQuantTokens tokens (capped at
// kMaxGridY), and shared memory for a tile of those tokens' activations.
LaunchShape group_quant_launch(int64_t rows, int64_t n_tokens);

// y[n_tokens, rows] of a Q8_0/Q4_0 or group-quantized matrix on tensor cores: a block per tile of
// kQuantMmaRows rows (grid.x) by kQuantMmaTokens tokens (grid.y, capped at kMaxGridY).
LaunchShape quant_mma_launch(int64_t rows, int64_t n_tokens);

// The activations of a Q8_0/Q4_0 product quantized a block of 32 per warp.
LaunchShape act_quant_launch(int64_t n_tokens, int64_t cols);
// Attention of a step: grid (n_tokens, n_heads, splits), shared memory for the query, a
// tile of scores and the block reduction.
LaunchShape attention_launch(int64_t n_tokens, int32_t n_heads, int32_t head_dim, int32_t splits = 1);
uint32_t attention_shared_bytes(int32_t head_dim);

// Split attention (flash-decoding): into how many key ranges each (token, head) of a
// step is cut. Where n_tokens * n_heads blocks would leave the device's `sm_count` SMs
// short of two blocks each, enough ranges to reach that, as long as the longest context
// (`max_keys`) gives each at least kAttentionSplitMinKeys keys (a query's last range, and
// a shorter query's, may have fewer), at most kAttentionMaxSplits; else 1 (one block per
// (token, head) has the keys to itself).
int32_t attention_splits(int64_t n_tokens, int32_t n_heads, int32_t max_keys, int32_t sm_count);
// Scratch of a split attention: per (token, head, range) its partial output and softmax
// state (head_dim + 2 floats).
size_t attention_scratch_bytes(int64_t n_tokens, int32_t n_heads, int32_t head_dim, int32_t splits);
// The merge of a split attention's ranges: a block per (token, head), a thread per
// output dimension.
LaunchShape attention_merge_launch(int64_t n_tokens, int32_t n_heads, int32_t head_dim);

}  // namespace hearth::kernels::cuda
