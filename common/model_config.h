// ModelConfig: the architecture of a decoder-only transformer, as read from its own files.
// One forward pass (engine/core/model.h) serves every family; what differs between them
// (norms, residual wiring, activation, rotary share, biases, q/k norms) is data here.
//
// Every model container (HF config.json, GGUF metadata, llama2.c header) is turned into
// this one struct by loader/; engines read nothing else. Plain data; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/pooling.h"
#include "common/status.h"

namespace hearth {

// Which pairs of a head's dimensions RoPE rotates together. Both describe the same
// function once the q/k weight rows are laid out for them, so each container keeps its
// own rows and tells the engine which pairing they were written for.
enum class RopeStyle : uint8_t {
  kInterleaved = 0,  // pairs (2i, 2i+1): GGUF llama, llama2.c, Meta checkpoints
  kHalf = 1,         // pairs (i, i + d/2): HF "rotate_half", GGUF qwen2
};

enum class RopeScalingType : uint8_t { kNone = 0, kLinear = 1, kLlama3 = 2 };

// The norm every norm of the model is: RMSNorm with a weight (Llama, Qwen), or
// LayerNorm with a weight and a bias (GPT-J, GPT-NeoX).
enum class NormKind : uint8_t { kRms = 0, kLayer = 1 };

// The feed-forward activation: of the gate, times up, when the FFN is gated (SwiGLU,
// GeGLU); of up alone otherwise (GPT-J, GPT-NeoX).
enum class Activation : uint8_t {
  kSilu = 0,
  kGelu = 1,      // exact, erf ("gelu")
  kGeluTanh = 2,  // tanh approximation ("gelu_new", "gelu_pytorch_tanh")
};

// How attention and the FFN are wired into the residual stream:
//   kSequential: x += attn(norm1(x)); x += ffn(norm2(x))            Llama, Qwen
//   kParallel:   x += attn(norm1(x)) + ffn(norm2(x))                GPT-NeoX
//   kParallelSharedNorm: h = norm1(x); x += attn(h) + ffn(h)        GPT-J
enum class Residual : uint8_t { kSequential = 0, kParallel = 1, kParallelSharedNorm = 2 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;   // llama3
  float high_freq_factor = 4.0f;  // llama3
  int32_t original_context = 8192;  // llama3: original_max_position_embeddings
};

struct ModelConfig {
  std::string architecture;  // "llama", "mistral", "qwen2", "qwen3", "gptneox", "gptj" (GGUF spelling)
  int32_t vocab_size = 0;
  int32_t dim = 0;           // hidden size
  int32_t hidden_dim = 0;    // feed-forward size
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t max_context = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeStyle rope_style = RopeStyle::kInterleaved;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool qkv_bias = false;      // Qwen2
  int32_t sliding_window = 0;  // 0: full attention (Mistral v0.1 uses 4096)
  NormKind norm = NormKind::kRms;
  Activation activation = Activation::kSilu;
  bool gated_ffn = true;         // gate and up projections; false: up alone
  Residual residual = Residual::kSequential;
  int32_t rotary_dim = 0;        // dimensions of a head RoPE rotates; 0: all (head_dim)
  bool qk_norm = false;          // RMSNorm of each query and key head before RoPE (Qwen3)
  bool attn_output_bias = false; // a bias on the attention output projection
  bool ffn_bias = false;         // biases on the FFN's projections (up, gate, down)
  bool output_bias = false;      // a bias on the LM head (GPT-J)
  // Mixture of experts (Mixtral, Qwen3-MoE): every layer's FFN is n_experts experts of
  // hidden_dim each, of which a softmax router picks n_experts_used per token; 0: dense.
  int32_t n_experts = 0;
  int32_t n_experts_used = 0;
  bool moe_normalize = true;     // the chosen experts' weights renormalised to sum 1
  // Qwen2-MoE, GLM-4.5: one shared expert of shared_expert_dim (0: none) that every
  // token runs beside its routed ones, its output times sigmoid(x . gate) when
  // shared_expert_gate (Qwen2-MoE).
  int32_t shared_expert_dim = 0;
  bool shared_expert_gate = false;
  // GLM-4.5 (DeepSeek V3's router): each expert's score the sigmoid of its logit rather
  // than its softmax probability; the k chosen by score plus a learnt per-expert bias
  // (blk.N.exp_probs_b.bias) when router_bias; the weights times routed_scale. The first
  // n_dense_layers layers have a dense FFN of dense_hidden_dim instead of experts.
  bool router_sigmoid = false;
  bool router_bias = false;
  float routed_scale = 1.0f;
  int32_t n_dense_layers = 0;
  int32_t dense_hidden_dim = 0;
  // Gemma 3: the embeddings scaled by embedding_scale (0: not scaled); a norm of each
  // block's output before it is added (post_attention_norm, post_ffw_norm); an attention
  // scale other than 1/sqrt(head_dim) (0: that one); every sliding_window_pattern-th
  // layer global and the others windowed (0: sliding_window, if any, on every layer),
  // the windowed ones with RoPE base rope_local_theta and no scaling (0: as the others).
  float embedding_scale = 0.0f;
  bool sandwich_norm = false;
  float attention_scale = 0.0f;
  int32_t sliding_window_pattern = 0;
  float rope_local_theta = 0.0f;
  // Gemma 2: attention scores and the final logits soft-capped, s -> cap * tanh(s / cap)
  // (0: not capped).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // The embedding pooling the model was trained for (GGUF's {arch}.pooling_type,
  // sentence-transformers' 1_Pooling/config.json); kNone: not stated.
  Pooling pooling = Pooling::kNone;

  int32_t q_dim() const { return n_heads * head_dim; }
  int32_t rotary() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
  // Whether layer `layer` attends through the sliding window.
  bool windowed(int32_t layer) const {
    return sliding_window > 0 && (sliding_window_pattern == 0 || (layer + 1) % sliding_window_pattern != 0);
  }
  int32_t kv_dim() const { return n_kv_heads * head_dim; }
  // Whether layer `layer`'s FFN is experts, and its (each expert's, or the dense) size.
  bool expert_layer(int32_t layer) const { return n_experts > 0 && layer >= n_dense_layers; }
  int32_t ffn_dim(int32_t layer) const { return n_experts > 0 && !expert_layer(layer) ? dense_hidden_dim : hidden_dim; }
};

// Checks that the numbers describe a model hearth can run (positive, divisible, within
// sane bounds), so that no later allocation is sized by a hostile file.
Status model_config_validate(const ModelConfig& config);

// RoPE inverse frequencies ([rotary() / 2]) for `config`: theta^(-2i/d), with linear or
// Llama 3 scaling, divided by `freq_factors` when given (GGUF's rope_freqs.weight).
std::vector<float> rope_inv_freq(const ModelConfig& config, const float* freq_factors);
// The windowed layers' frequencies when they have a base of their own (rope_local_theta):
// theta_local^(-2i/d), unscaled.
std::vector<float> rope_local_inv_freq(const ModelConfig& config);

// The config as a JSON object and back (the weights segment stores it this way). The
// reader validates with model_config_validate.
std::string model_config_to_json(const ModelConfig& config);
Result<ModelConfig> model_config_from_json(std::string_view json);

// One line for logs and `hearth generate --json`.
std::string model_config_summary(const ModelConfig& config);

}  // namespace hearth
