// ops_impl.h's loops compiled for AVX-512 (16 floats a vector instead of SSE2's 4); only
// called when the CPU has it (isa.h).
#include "kernels/cpu/ops_impl.h"

namespace hearth::kernels::cpu {

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out) { swiglu_impl(gate, up, n, out); }

double sum_exp_below_avx512(const float* x, int64_t n, float max) { return sum_exp_below_impl(x, n, max); }

void lora_rows_avx512(const LoraProduct& p, int64_t t0, int64_t t1) { lora_rows_impl(p, t0, t1); }

}  // namespace hearth::kernels::cpu
