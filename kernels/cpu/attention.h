// CPU attention over a paged KV cache: one pass over the keys, a cache block at a time,
// with an online softmax (running max and sum, flash-attention style), so no score
// buffer beyond one block is needed and the cost is linear in the context. Vectorized
// over head_dim for each instruction set. Every path reads a cache of every KvDType:
// f16 and bf16 elements are widened exactly as they are loaded, so the result equals the
// f32 kernel's on the widened values, bit for bit. Thread-safe for disjoint outputs.
#pragma once

#include "kernels/attention_params.h"

namespace hearth::kernels::cpu {

// Attention for heads [head_begin, head_end) of every query token (callers may split
// heads across threads). A p.kv_dtype outside the enum aborts: callers validate it
// before the hot path.
// Runs on the active instruction-set path (isa.h); the others are there for tests.
void attention(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_scalar(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_avx2(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_avx512(const AttentionParams& p, int32_t head_begin, int32_t head_end);

}  // namespace hearth::kernels::cpu
