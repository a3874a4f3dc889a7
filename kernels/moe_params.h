// How a mixture of experts' router turns a token's logits into its k experts and their
// weights, as every implementation (reference, CPU, CUDA) receives it. Plain data; the
// bias pointer is backend memory.
#pragma once

#include <cstdint>

namespace hearth::kernels {

struct MoeRouting {
  int32_t n_experts = 0;
  int32_t k = 0;               // experts per token, 1..n_experts
  bool normalize = false;      // the k weights renormalised to sum 1 (Mixtral, norm_topk_prob)
  // Each expert's score: its softmax probability over all experts (Mixtral, Qwen), or the
  // sigmoid of its logit alone (DeepSeek V3, GLM-4.5).
  bool sigmoid = false;
  // Added to the scores to choose the k (e_score_correction_bias), not to their weights;
  // null: the k largest logits are chosen.
  const float* bias = nullptr;  // [n_experts]
  float scale = 1.0f;           // the k weights times this, last (routed_scaling_factor)
};

}  // namespace hearth::kernels
