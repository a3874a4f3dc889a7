// CPU attention over a paged KV cache: one pass over the keys, a cache block at a time,
// with an online softmax (running max and sum, flash-attention style), so no score
// buffer beyond one block is needed and the cost is linear in the context. Vectorized
// over head_dim for each instruction set. Thread-safe for disjoint outputs.
#pragma once

#include "kernels/attention_params.h"

namespace hearth::kernels::cpu {

// Attention for heads [head_begin, head_end) of every query token (callers may split
// heads across threads).
// Runs on the active instruction-set path (isa.h); the others are there for tests.
void attention(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_scalar(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_avx2(const AttentionParams& p, int32_t head_begin, int32_t head_end);
void attention_avx512(const AttentionParams& p, int32_t head_begin, int32_t head_end);

}  // namespace hearth::kernels::cpu
