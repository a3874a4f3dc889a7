// CPU store of a step's K and V rows into the paged KV cache (layouts and dtypes in
// kernels/attention_params.h). Thread-safe for disjoint slots.
#pragma once

#include "kernels/attention_params.h"

namespace hearth::kernels::cpu {

// Writes token t's K and V rows to cache slot p.slots[t] in p.kv_dtype: f32 copied, f16
// and bf16 rounded to nearest even with common/half.h, so the bytes equal ref::kv_store's
// on every machine. One scalar path: it writes n_tokens * n_kv_heads * head_dim elements
// of each layer per step, nothing next to attention reading the whole context.
void kv_store(const KvStoreParams& p);

}  // namespace hearth::kernels::cpu
