#include "common/model_tensors.h"

#include <unordered_map>

#include <fmt/format.h>

namespace hearth {

std::vector<TensorSpec> model_tensor_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs;
  const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), v = c.vocab_size;
  const bool layer_norm = c.norm == NormKind::kLayer;
  auto norm = [&](const std::string& name) {
    specs.push_back({name + ".weight", {d}, true, false});
    if (layer_norm) specs.push_back({name + ".bias", {d}, true, false});
  };
  specs.push_back({"token_embd.weight", {v, d}, true, true});
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    const int64_t f = c.ffn_dim(i);
    norm(p + "attn_norm");
    specs.push_back({p + "attn_q.weight", {q, d}, true, true});
    specs.push_back({p + "attn_k.weight", {kv, d}, true, true});
    specs.push_back({p + "attn_v.weight", {kv, d}, true, true});
    if (c.qkv_bias) {
      specs.push_back({p + "attn_q.bias", {q}, true, false});
      specs.push_back({p + "attn_k.bias", {kv}, true, false});
      specs.push_back({p + "attn_v.bias", {kv}, true, false});
    }
    if (c.qk_norm) {
      specs.push_back({p + "attn_q_norm.weight", {c.head_dim}, true, false});
      specs.push_back({p + "attn_k_norm.weight", {c.head_dim}, true, false});
    }
    specs.push_back({p + "attn_output.weight", {d, q}, true, true});
    if (c.attn_output_bias) specs.push_back({p + "attn_output.bias", {d}, true, false});
    if (c.sandwich_norm) {
      specs.push_back({p + "post_attention_norm.weight", {d}, true, false});
      specs.push_back({p + "post_ffw_norm.weight", {d}, true, false});
    }
    if (c.residual != Residual::kParallelSharedNorm) norm(p + "ffn_norm");
    if (c.expert_layer(i)) {
      // The router, and each expert's three matrices under its index.
      specs.push_back({p + "ffn_gate_inp.weight", {c.n_experts, d}, true, true});
      if (c.router_bias) specs.push_back({p + "exp_probs_b.bias", {c.n_experts}, true, false});
      for (int e = 0; e < c.n_experts; ++e) {
        specs.push_back({fmt::format("{}ffn_gate.{}.weight", p, e), {f, d}, true, true});
        specs.push_back({fmt::format("{}ffn_up.{}.weight", p, e), {f, d}, true, true});
        specs.push_back({fmt::format("{}ffn_down.{}.weight", p, e), {d, f}, true, true});
      }
      if (c.shared_expert_dim > 0) {
        const int64_t s = c.shared_expert_dim;
        specs.push_back({p + "ffn_gate_shexp.weight", {s, d}, true, true});
        specs.push_back({p + "ffn_up_shexp.weight", {s, d}, true, true});
        specs.push_back({p + "ffn_down_shexp.weight", {d, s}, true, true});
        if (c.shared_expert_gate) specs.push_back({p + "ffn_gate_inp_shexp.weight", {1, d}, true, true});
      }
      specs.push_back({p + "attn_output.perm", {q}, false, false});
      for (const char* m : {"attn_q", "attn_k", "attn_v"}) specs.push_back({p + m + ".perm", {d}, false, false});
      continue;
    }
    if (c.gated_ffn) specs.push_back({p + "ffn_gate.weight", {f, d}, true, true});
    specs.push_back({p + "ffn_up.weight", {f, d}, true, true});
    specs.push_back({p + "ffn_down.weight", {d, f}, true, true});
    if (c.ffn_bias) {
      if (c.gated_ffn) specs.push_back({p + "ffn_gate.bias", {f}, true, false});
      specs.push_back({p + "ffn_up.bias", {f}, true, false});
      specs.push_back({p + "ffn_down.bias", {d}, true, false});
    }
    // Act-order matrices stored with their columns permuted: the order, one per matrix.
    for (const char* m : {"attn_q", "attn_k", "attn_v", "ffn_gate", "ffn_up"}) {
      if (std::string_view(m) == "ffn_gate" && !c.gated_ffn) continue;
      specs.push_back({p + m + ".perm", {d}, false, false});
    }
    specs.push_back({p + "attn_output.perm", {q}, false, false});
  }
  norm("output_norm");
  specs.push_back({"output.weight", {v, d}, !c.tied_embeddings, true});
  if (c.output_bias) specs.push_back({"output.bias", {v}, true, false});
  specs.push_back({"rope_freqs.weight", {c.rotary() / 2}, false, false});
  return specs;
}

Status model_check_tensors(const ModelConfig& config, const std::vector<TensorView>& tensors) {
  const std::vector<TensorSpec> specs = model_tensor_specs(config);
  std::unordered_map<std::string_view, const TensorSpec*> spec_by_name;
  for (const TensorSpec& spec : specs) spec_by_name.emplace(spec.name, &spec);
  std::unordered_map<std::string_view, const TensorView*> by_name;
  for (const TensorView& t : tensors) {
    const auto it = spec_by_name.find(t.name);
    if (it == spec_by_name.end()) {
      return make_error(ErrorCode::kUnsupported,
                        "tensor {} is not part of the {} architecture as hearth implements it; refusing to ignore it",
                        t.name, config.architecture);
    }
    const TensorSpec& spec = *it->second;
    bool same = t.n_dims == static_cast<int>(spec.shape.size());
    for (int k = 0; same && k < t.n_dims; ++k) same = t.shape[k] == spec.shape[k];
    if (!same) {
      std::string want = "[";
      for (size_t k = 0; k < spec.shape.size(); ++k) want += fmt::format("{}{}", k ? ", " : "", spec.shape[k]);
      return make_error(ErrorCode::kFormat, "tensor {} has shape {}, but the model config needs {}]", spec.name,
                        shape_string(t), want);
    }
    if (!spec.matrix && t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
      return make_error(ErrorCode::kUnsupported, "tensor {} is {}; norms and biases must be f32, f16 or bf16",
                        spec.name, dtype_name(t.dtype));
    }
    by_name.emplace(t.name, &t);
  }
  for (const TensorSpec& spec : specs) {
    if (spec.required && !by_name.contains(spec.name)) {
      return make_error(ErrorCode::kFormat, "the model has no tensor {}", spec.name);
    }
  }
  return Status::ok();
}

}  // namespace hearth
