// Parameters of attention over a paged KV cache and of the store that fills it, shared
// by every implementation (reference, CPU, CUDA). Plain data; the index functions are
// HEARTH_HD, so kernels on either side compute the same addresses.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace hearth::kernels {

// How the cache stores each key and value element. Attention always computes in float32:
// f16 (IEEE binary16) and bf16 elements are widened exactly on load, so a narrower cache
// halves the bytes read and changes only what kv_store rounded away (to nearest even).
enum class KvDType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

// Bytes of one element; 0 for a value outside the enum.
constexpr int32_t kv_dtype_bytes(KvDType t) {
  switch (t) {
    case KvDType::kF32: return 4;
    case KvDType::kF16: return 2;
    case KvDType::kBF16: return 2;
  }
  return 0;
}

// "f32", "f16", "bf16"; "unsupported" for a value outside the enum.
constexpr const char* kv_dtype_name(KvDType t) {
  switch (t) {
    case KvDType::kF32: return "f32";
    case KvDType::kF16: return "f16";
    case KvDType::kBF16: return "bf16";
  }
  return "unsupported";
}

struct AttentionParams {
  const float* q = nullptr;        // [n_tokens, n_heads, head_dim]
  float* out = nullptr;            // [n_tokens, n_heads, head_dim]
  const void* k_cache = nullptr;   // [n_blocks, n_kv_heads, head_dim, block_size] of kv_dtype, this layer
  const void* v_cache = nullptr;   // [n_blocks, n_kv_heads, block_size, head_dim] of kv_dtype
  const int32_t* block_table = nullptr;  // the sequence's blocks, in order
  const int32_t* positions = nullptr;    // [n_tokens] absolute position of each query
  int32_t block_size = 16;
  int32_t n_tokens = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;              // usually 1/sqrt(head_dim)
  float softcap = 0.0f;            // > 0: each score s becomes softcap * tanh(s / softcap)
  int32_t sliding_window = 0;      // 0: attend to every earlier position
  KvDType kv_dtype = KvDType::kF32;  // element type of k_cache and v_cache
};

// Causal attention of every sequence of a step over its own KV blocks, as every backend
// receives it: the queries of sequence s are rows [query_start[s], query_start[s + 1]) of
// q, its keys those at positions up to each query's position in
// pages[page_start[s]..page_start[s + 1]). The CUDA kernel runs it as it is; kernels that
// take one sequence at a time get AttentionParams from sequence_attention().
struct AttentionStep {
  const float* q = nullptr;          // [n_tokens, n_heads, head_dim]
  float* out = nullptr;              // [n_tokens, n_heads, head_dim]
  const void* k_cache = nullptr;     // [n_blocks, n_kv_heads, head_dim, block_size] of kv_dtype, this layer
  const void* v_cache = nullptr;     // [n_blocks, n_kv_heads, block_size, head_dim] of kv_dtype
  const int32_t* positions = nullptr;    // [n_tokens]
  const int32_t* query_start = nullptr;  // [n_seqs + 1]
  const int32_t* page_start = nullptr;   // [n_seqs + 1]
  const int32_t* pages = nullptr;
  int32_t n_tokens = 0;
  int32_t n_seqs = 0;
  int32_t block_size = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;                // usually 1/sqrt(head_dim)
  float softcap = 0.0f;              // > 0: each score s becomes softcap * tanh(s / softcap)
  int32_t sliding_window = 0;        // 0: every earlier position
  KvDType kv_dtype = KvDType::kF32;
  int32_t max_keys = 0;              // the most keys a query attends (its position + 1), for split attention; 0: unknown
};

// Sequence s of a step as one AttentionParams.
HEARTH_HD AttentionParams sequence_attention(const AttentionStep& st, int32_t s) {
  const int32_t r0 = st.query_start[s];
  const int64_t row = static_cast<int64_t>(st.n_heads) * st.head_dim;
  AttentionParams p;
  p.q = st.q + r0 * row;
  p.out = st.out + r0 * row;
  p.k_cache = st.k_cache;
  p.v_cache = st.v_cache;
  p.block_table = st.pages + st.page_start[s];
  p.positions = st.positions + r0;
  p.block_size = st.block_size;
  p.n_tokens = st.query_start[s + 1] - r0;
  p.n_heads = st.n_heads;
  p.n_kv_heads = st.n_kv_heads;
  p.head_dim = st.head_dim;
  p.scale = st.scale;
  p.softcap = st.softcap;
  p.sliding_window = st.sliding_window;
  p.kv_dtype = st.kv_dtype;
  return p;
}

// Where one layer's K and V rows go: token t of the batch is stored at cache slot
// slots[t] (= block * block_size + offset), in the layouts below, converted to kv_dtype
// (rounded to nearest even).
struct KvStoreParams {
  const float* k = nullptr;        // [n_tokens, n_kv_heads * head_dim]
  const float* v = nullptr;        // [n_tokens, n_kv_heads * head_dim]
  void* k_cache = nullptr;         // [n_blocks, n_kv_heads, head_dim, block_size] of kv_dtype, this layer
  void* v_cache = nullptr;         // [n_blocks, n_kv_heads, block_size, head_dim] of kv_dtype
  const int32_t* slots = nullptr;  // [n_tokens]
  int64_t n_tokens = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
  KvDType kv_dtype = KvDType::kF32;
};

// Where the cache keeps position `offset` of block `block` for one KV head, in elements
// (of kv_dtype) from the layer's base. Keys are stored transposed within a block (a
// head's block is [head_dim, block_size]), so a query's scores against a block are one
// vector over its keys; values are rows ([block_size, head_dim]), so the weighted sum
// runs along head_dim.
HEARTH_HD int64_t kv_key_index(int64_t block, int32_t kv_head, int32_t d, int32_t offset, int32_t n_kv_heads,
                            int32_t head_dim, int32_t block_size) {
  return ((block * n_kv_heads + kv_head) * head_dim + d) * block_size + offset;
}
HEARTH_HD int64_t kv_value_index(int64_t block, int32_t kv_head, int32_t offset, int32_t n_kv_heads, int32_t head_dim,
                              int32_t block_size) {
  return ((block * n_kv_heads + kv_head) * block_size + offset) * static_cast<int64_t>(head_dim);
}

// The first key position query position `pos` attends to.
HEARTH_HD int32_t attention_first_key(int32_t pos, int32_t sliding_window) {
  return (sliding_window > 0 && pos >= sliding_window) ? pos - sliding_window + 1 : 0;
}

// Split attention: range `split` of `splits` of the keys [first, pos] a query attends,
// as [begin, end): consecutive ranges of equal length rounded up to a multiple of
// `granule` (a kernel's tile of keys), so the ranges cover the keys once, in order, and
// the last ones may be short or empty (begin == end).
HEARTH_HD void attention_split_range(int32_t first, int32_t pos, int32_t splits, int32_t split, int32_t granule,
                                     int32_t& begin, int32_t& end) {
  const int32_t n = pos - first + 1;
  int32_t chunk = (n + splits - 1) / splits;
  chunk = (chunk + granule - 1) / granule * granule;
  const int64_t b = first + static_cast<int64_t>(split) * chunk;
  begin = b > pos + 1 ? pos + 1 : static_cast<int32_t>(b);
  end = begin + chunk > pos + 1 ? pos + 1 : begin + chunk;
}

}  // namespace hearth::kernels
