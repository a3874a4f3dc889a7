// ops_impl.h's LoRA loops compiled for AVX2 (8 floats a vector); only called when the
// CPU has it (isa.h). The other elementwise ops stay on the baseline build: they are
// bandwidth-bound, the LoRA products are not.
#include "kernels/cpu/ops_impl.h"

namespace hearth::kernels::cpu {

void lora_rows_avx2(const LoraProduct& p, int64_t t0, int64_t t1) { lora_rows_impl(p, t0, t1); }

}  // namespace hearth::kernels::cpu
