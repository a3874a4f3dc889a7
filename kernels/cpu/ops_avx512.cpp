// ops_impl.h's loops compiled for AVX-512 (16 floats a vector instead of SSE2's 4); only
// called when the CPU has it (isa.h).
#include "kernels/cpu/ops_impl.h"

namespace hearth::kernels::cpu {

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) { swiglu_impl(gate, up, n, out); }

double sum_exp_below_avx512(const float* x, int64_t n, float max) { return sum_exp_below_impl(x, n, max); }

void lora_shrink_avx512(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0,
                        int32_t j1) {
  lora_shrink_impl(p, f, rows, n, j0, j1);
}
void lora_expand_avx512(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0,
                        int64_t o1) {
  lora_expand_impl(p, f, rows, n, o0, o1);
}

}  // namespace hearth::kernels::cpu
