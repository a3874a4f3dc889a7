// Parameters of attention over a paged KV cache, shared by every implementation.
// Plain data; no dependencies beyond the standard library.
#pragma once

#include <cstdint>

namespace hearth::kernels {

struct AttentionParams {
  const float* q = nullptr;        // [n_tokens, n_heads, head_dim]
  float* out = nullptr;            // [n_tokens, n_heads, head_dim]
  const float* k_cache = nullptr;  // [n_blocks, n_kv_heads, head_dim, block_size] of this layer
  const float* v_cache = nullptr;  // [n_blocks, n_kv_heads, block_size, head_dim]
  const int32_t* block_table = nullptr;  // the sequence's blocks, in order
  const int32_t* positions = nullptr;    // [n_tokens] absolute position of each query
  int32_t block_size = 16;
  int32_t n_tokens = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;              // usually 1/sqrt(head_dim)
  int32_t sliding_window = 0;      // 0: attend to every earlier position
};

// Where the cache keeps position `offset` of block `block` for one KV head. Keys are
// stored transposed within a block (a head's block is [head_dim, block_size]), so a
// query's scores against a block are one vector over its keys; values are rows
// ([block_size, head_dim]), so the weighted sum runs along head_dim.
inline int64_t kv_key_index(int64_t block, int32_t kv_head, int32_t d, int32_t offset, int32_t n_kv_heads,
                            int32_t head_dim, int32_t block_size) {
  return ((block * n_kv_heads + kv_head) * head_dim + d) * block_size + offset;
}
inline int64_t kv_value_index(int64_t block, int32_t kv_head, int32_t offset, int32_t n_kv_heads, int32_t head_dim,
                              int32_t block_size) {
  return ((block * n_kv_heads + kv_head) * block_size + offset) * static_cast<int64_t>(head_dim);
}

// The first key position query position `pos` attends to.
inline int32_t attention_first_key(int32_t pos, int32_t sliding_window) {
  return (sliding_window > 0 && pos >= sliding_window) ? pos - sliding_window + 1 : 0;
}

}  // namespace hearth::kernels
