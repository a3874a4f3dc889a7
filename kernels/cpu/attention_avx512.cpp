// attention() compiled for AVX512 (see attention_impl.h); called only on CPUs that have it.
#include "kernels/cpu/attention_impl.h"

namespace hearth::kernels::cpu {

void attention_avx512(const AttentionParams& p, int32_t head_begin, int32_t head_end) {
  attention_impl(p, head_begin, head_end);
}

}  // namespace hearth::kernels::cpu
