#include "kernels/cpu/kv_store.h"

#include <cstring>

#include "common/check.h"
#include "common/half.h"

namespace hearth::kernels::cpu {

namespace {

// One element of the cache's type from a float.
template <KvDType D>
inline auto kv_encode(float x) {
  if constexpr (D == KvDType::kF32) {
    return x;
  } else if constexpr (D == KvDType::kF16) {
    return f32_to_fp16(x);
  } else {
    return f32_to_bf16(x);
  }
}

template <KvDType D>
void kv_store_typed(const KvStoreParams& p) {
  using Elem = decltype(kv_encode<D>(0.0f));
  auto* k_cache = static_cast<Elem*>(p.k_cache);
  auto* v_cache = static_cast<Elem*>(p.v_cache);
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  const int64_t bs = p.block_size;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t block = p.slots[t] / p.block_size;
    const int32_t offset = p.slots[t] % p.block_size;
    for (int32_t h = 0; h < p.n_kv_heads; ++h) {
      const float* k = p.k + t * kv_dim + static_cast<int64_t>(h) * p.head_dim;
      const float* v = p.v + t * kv_dim + static_cast<int64_t>(h) * p.head_dim;
      Elem* kc = k_cache + kv_key_index(block, h, 0, offset, p.n_kv_heads, p.head_dim, p.block_size);
      Elem* vc = v_cache + kv_value_index(block, h, offset, p.n_kv_heads, p.head_dim, p.block_size);
      for (int32_t d = 0; d < p.head_dim; ++d) kc[d * bs] = kv_encode<D>(k[d]);  // keys transposed
      if constexpr (D == KvDType::kF32) {
        std::memcpy(vc, v, static_cast<size_t>(p.head_dim) * sizeof(float));
      } else {
        for (int32_t d = 0; d < p.head_dim; ++d) vc[d] = kv_encode<D>(v[d]);
      }
    }
  }
}

}  // namespace

void kv_store(const KvStoreParams& p) {
  switch (p.kv_dtype) {
    case KvDType::kF32: kv_store_typed<KvDType::kF32>(p); return;
    case KvDType::kF16: kv_store_typed<KvDType::kF16>(p); return;
    case KvDType::kBF16: kv_store_typed<KvDType::kBF16>(p); return;
  }
  HEARTH_CHECK(false) << "unsupported KV cache dtype " << static_cast<int>(p.kv_dtype);
}

}  // namespace hearth::kernels::cpu
