// ops_impl.h's LoRA loops compiled for AVX2 (8 floats a vector); only called when the
// CPU has it (isa.h). The other elementwise ops stay on the baseline build: they are
// bandwidth-bound, the LoRA products are not.
#include "kernels/cpu/ops_impl.h"

namespace hearth::kernels::cpu {

void lora_shrink_avx2(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0,
                      int32_t j1) {
  lora_shrink_impl(p, f, rows, n, j0, j1);
}
void lora_expand_avx2(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0,
                      int64_t o1) {
  lora_expand_impl(p, f, rows, n, o0, o1);
}

}  // namespace hearth::kernels::cpu
