// CPU attention over a paged KV cache: one pass over the keys with an online softmax
// (running max and sum, flash-attention style), so no score buffer is needed and the
// cost is linear in the context. Thread-safe for disjoint outputs.
#pragma once

#include "kernels/attention_params.h"

namespace hearth::kernels::cpu {

// Attention for heads [head_begin, head_end) of every query token (callers may split
// heads across threads).
void attention(const AttentionParams& p, int32_t head_begin, int32_t head_end);

}  // namespace hearth::kernels::cpu
