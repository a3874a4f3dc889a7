// The tensors a model is made of, by canonical (GGUF-style) name and shape, derived from
// its ModelConfig (which families add which: the norms' .bias with LayerNorm, the q/k
// norms, the biases of the output and FFN projections, no ffn_gate when ungated, no
// ffn_norm with a shared-norm parallel residual; with experts, the router
// blk.N.ffn_gate_inp.weight [n_experts, dim] and blk.N.ffn_{gate,up,down}.E.weight for
// each expert E in place of the dense FFN, and with a shared expert
// blk.N.ffn_{gate,up,down}_shexp.weight and, gated, blk.N.ffn_gate_inp_shexp.weight
// [1, dim]; a router's choice bias blk.N.exp_probs_b.bias [n_experts]; the first
// n_dense_layers layers dense, of dense_hidden_dim). Every container is mapped onto these names by
// the loader; the engine binds its weights through them. Pure functions; thread-safe.
//
// Names: token_embd.weight, output_norm.weight, output.weight (absent when tied),
// rope_freqs.weight (optional per-dimension frequency divisors, GGUF Llama 3),
// blk.N.{attn_norm, attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
// ffn_down}.weight, with qkv_bias blk.N.attn_{q,k,v}.bias, with qk_norm
// blk.N.attn_{q,k}_norm.weight ([head_dim]), LayerNorm biases {attn_norm, ffn_norm,
// output_norm}.bias, blk.N.attn_output.bias, blk.N.ffn_{gate,up,down}.bias, output.bias,
// with sandwich_norm blk.N.{post_attention_norm, post_ffw_norm}.weight;
// and optionally
// blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up}.perm: a matrix whose
// columns are stored permuted (act-order GPTQ, so that each quantization group is
// contiguous) reads input column perm[j] as its column j; float values, exact integers.
// ffn_down has none: the loader moves its order into ffn_gate's and ffn_up's rows.
#pragma once

#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"

namespace hearth {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;  // outermost first
  bool required = true;
  bool matrix = false;  // a weight matrix (may be quantized); otherwise it must be float
};

// Every tensor the model may have, in a stable order.
std::vector<TensorSpec> model_tensor_specs(const ModelConfig& config);

// Checks a container's tensors against the specs: each required one present, every
// shape as expected, vectors (norms, biases) in a float type, no tensor the model
// would silently ignore. The message names the tensor and both shapes.
Status model_check_tensors(const ModelConfig& config, const std::vector<TensorView>& tensors);

}  // namespace hearth
