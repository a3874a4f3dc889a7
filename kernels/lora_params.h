// One matrix's LoRA products over a step, as every implementation (reference, CPU, CUDA)
// receives them: y[t] += scale_s * B_s (A_s x[t]) for each row t whose adapter slot s
// (row_slot[t] >= 0) adapts this matrix. Plain data; every pointer is backend memory.
#pragma once

#include <cstdint>

namespace hearth::kernels {

// One adapter's factors of one matrix. a == null: the adapter leaves it alone. B is held
// transposed, so that the expansion reads contiguous outputs.
struct LoraFactors {
  const float* a = nullptr;   // [rank, in]
  const float* bt = nullptr;  // [rank, out]: B transposed
  int32_t rank = 0;
  float scale = 0.0f;  // lora_alpha / rank (or / sqrt(rank) with rsLoRA)
};

struct LoraProduct {
  const float* x = nullptr;          // [n, in]
  float* y = nullptr;                // [n, out], added to
  const int32_t* row_slot = nullptr; // [n]: each row's adapter slot, -1 for none
  const LoraFactors* factors = nullptr;  // [n_slots]
  float* scratch = nullptr;          // [n, max_rank]: the shrunk rows A x
  int64_t n = 0;
  int64_t in = 0;
  int64_t out = 0;
  int32_t n_slots = 0;
  int32_t max_rank = 0;  // every factor's rank is at most this
};

}  // namespace hearth::kernels
