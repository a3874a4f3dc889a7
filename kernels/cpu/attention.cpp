#include "kernels/cpu/attention.h"

#include "kernels/cpu/attention_impl.h"
#include "kernels/cpu/isa.h"

namespace hearth::kernels::cpu {

void attention_scalar(const AttentionParams& p, int32_t head_begin, int32_t head_end) {
  attention_impl(p, head_begin, head_end);
}

void attention(const AttentionParams& p, int32_t head_begin, int32_t head_end) {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: attention_avx512(p, head_begin, head_end); return;
    case CpuIsa::kAvx2: attention_avx2(p, head_begin, head_end); return;
    case CpuIsa::kScalar: attention_scalar(p, head_begin, head_end); return;
  }
}

}  // namespace hearth::kernels::cpu
