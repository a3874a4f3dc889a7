// Hugging Face directory (config.json + safetensors) -> LoadedModel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <span>

#include "common/half.h"
#include "common/json.h"
#include "loader/fused_qkv.h"
#include "loader/model.h"
#include "loader/prequantized.h"
#include "loader/safetensors.h"

namespace hearth {
namespace {

constexpr size_t kMaxConfigBytes = 16u << 20;

using NamePair = std::pair<std::string_view, std::string_view>;

// One family's parameter names: whole-model ones, those under `layer_prefix` N, and a
// mixture of experts' under `layer_prefix` N `experts_prefix` E (each mapped to
// "<canonical>.E.weight").
struct HfNames {
  std::string_view layer_prefix;
  std::span<const NamePair> globals;
  std::span<const NamePair> layers;
  std::span<const std::string_view> buffers;  // layer parameters that carry no weights
  std::span<const NamePair> moe_layers = {};  // the router
  std::string_view experts_prefix = {};
  std::span<const NamePair> experts = {};
};

constexpr NamePair kLlamaGlobals[] = {
    {"model.embed_tokens.weight", "token_embd.weight"},
    {"model.norm.weight", "output_norm.weight"},
    {"lm_head.weight", "output.weight"},
};
constexpr NamePair kLlamaLayers[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_proj.bias", "ffn_gate.bias"},
    {"mlp.up_proj.bias", "ffn_up.bias"},
    {"mlp.down_proj.bias", "ffn_down.bias"},
};
constexpr std::string_view kLlamaBuffers[] = {"self_attn.rotary_emb.inv_freq"};

constexpr NamePair kNeoxGlobals[] = {
    {"gpt_neox.embed_in.weight", "token_embd.weight"},
    {"gpt_neox.final_layer_norm.weight", "output_norm.weight"},
    {"gpt_neox.final_layer_norm.bias", "output_norm.bias"},
    {"embed_out.weight", "output.weight"},
};
constexpr NamePair kNeoxLayers[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"input_layernorm.bias", "attn_norm.bias"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"post_attention_layernorm.bias", "ffn_norm.bias"},
    {"attention.query_key_value.weight", "attn_qkv.weight"},
    {"attention.query_key_value.bias", "attn_qkv.bias"},
    {"attention.dense.weight", "attn_output.weight"},
    {"attention.dense.bias", "attn_output.bias"},
    {"mlp.dense_h_to_4h.weight", "ffn_up.weight"},
    {"mlp.dense_h_to_4h.bias", "ffn_up.bias"},
    {"mlp.dense_4h_to_h.weight", "ffn_down.weight"},
    {"mlp.dense_4h_to_h.bias", "ffn_down.bias"},
};
constexpr std::string_view kNeoxBuffers[] = {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"};

constexpr NamePair kGptjGlobals[] = {
    {"transformer.wte.weight", "token_embd.weight"},
    {"transformer.ln_f.weight", "output_norm.weight"},
    {"transformer.ln_f.bias", "output_norm.bias"},
    {"lm_head.weight", "output.weight"},
    {"lm_head.bias", "output.bias"},
};
constexpr NamePair kGptjLayers[] = {
    {"ln_1.weight", "attn_norm.weight"},
    {"ln_1.bias", "attn_norm.bias"},
    {"attn.q_proj.weight", "attn_q.weight"},
    {"attn.k_proj.weight", "attn_k.weight"},
    {"attn.v_proj.weight", "attn_v.weight"},
    {"attn.out_proj.weight", "attn_output.weight"},
    {"mlp.fc_in.weight", "ffn_up.weight"},
    {"mlp.fc_in.bias", "ffn_up.bias"},
    {"mlp.fc_out.weight", "ffn_down.weight"},
    {"mlp.fc_out.bias", "ffn_down.bias"},
};
constexpr std::string_view kGptjBuffers[] = {"attn.bias", "attn.masked_bias"};

// Gemma 2 and 3: "post_attention_layernorm" is the attention block's output norm, and
// the FFN's input norm is "pre_feedforward_layernorm" (Gemma 2 has no q/k norms).
constexpr NamePair kGemmaLayers[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

constexpr NamePair kQwenMoeRouter[] = {{"mlp.gate.weight", "ffn_gate_inp.weight"}};
constexpr NamePair kQwenMoeExperts[] = {
    {"gate_proj.weight", "ffn_gate"}, {"up_proj.weight", "ffn_up"}, {"down_proj.weight", "ffn_down"}};
// Qwen2-MoE: the router, and the shared expert with its gate.
constexpr NamePair kQwen2MoeRouter[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};
// GLM-4.5: the router with its choice bias, and the shared experts (one ungated MLP).
constexpr NamePair kGlmMoeRouter[] = {
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.gate.e_score_correction_bias", "exp_probs_b.bias"},
    {"mlp.shared_experts.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_experts.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_experts.down_proj.weight", "ffn_down_shexp.weight"},
};
constexpr NamePair kMixtralRouter[] = {{"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"}};
constexpr NamePair kMixtralExperts[] = {{"w1.weight", "ffn_gate"}, {"w3.weight", "ffn_up"}, {"w2.weight", "ffn_down"}};

constexpr HfNames kLlamaNames{"model.layers.", kLlamaGlobals, kLlamaLayers, kLlamaBuffers};
constexpr HfNames kQwenMoeNames{"model.layers.", kLlamaGlobals, kLlamaLayers, kLlamaBuffers,
                                kQwenMoeRouter, "mlp.experts.", kQwenMoeExperts};
constexpr HfNames kQwen2MoeNames{"model.layers.", kLlamaGlobals, kLlamaLayers, kLlamaBuffers,
                                 kQwen2MoeRouter, "mlp.experts.", kQwenMoeExperts};
constexpr HfNames kGlmMoeNames{"model.layers.", kLlamaGlobals, kLlamaLayers, kLlamaBuffers,
                               kGlmMoeRouter, "mlp.experts.", kQwenMoeExperts};
constexpr HfNames kMixtralNames{"model.layers.", kLlamaGlobals, kLlamaLayers, kLlamaBuffers,
                                kMixtralRouter, "block_sparse_moe.experts.", kMixtralExperts};
constexpr HfNames kGemmaNames{"model.layers.", kLlamaGlobals, kGemmaLayers, kLlamaBuffers};
constexpr HfNames kNeoxNames{"gpt_neox.layers.", kNeoxGlobals, kNeoxLayers, kNeoxBuffers};
constexpr HfNames kGptjNames{"transformer.h.", kGptjGlobals, kGptjLayers, kGptjBuffers};

Status read_llama_config(const boost::json::object& cfg, ModelConfig& c);
Status read_neox_config(const boost::json::object& cfg, ModelConfig& c);
Status read_gptj_config(const boost::json::object& cfg, ModelConfig& c);
Status read_gemma_config(const boost::json::object& cfg, ModelConfig& c);
Status read_glm4moe_config(const boost::json::object& cfg, ModelConfig& c);

struct HfArch {
  std::string_view hf_name;
  std::string_view name;  // GGUF spelling
  const HfNames* names;
  Status (*read)(const boost::json::object& cfg, ModelConfig& c);
};

constexpr HfArch kArchs[] = {
    {"LlamaForCausalLM", "llama", &kLlamaNames, read_llama_config},
    {"MistralForCausalLM", "mistral", &kLlamaNames, read_llama_config},
    {"Qwen2ForCausalLM", "qwen2", &kLlamaNames, read_llama_config},
    {"Qwen3ForCausalLM", "qwen3", &kLlamaNames, read_llama_config},
    {"Qwen2MoeForCausalLM", "qwen2moe", &kQwen2MoeNames, read_llama_config},
    {"Qwen3MoeForCausalLM", "qwen3moe", &kQwenMoeNames, read_llama_config},
    {"MixtralForCausalLM", "mixtral", &kMixtralNames, read_llama_config},
    {"Glm4MoeForCausalLM", "glm4moe", &kGlmMoeNames, read_glm4moe_config},
    {"GPTNeoXForCausalLM", "gptneox", &kNeoxNames, read_neox_config},
    {"GPTJForCausalLM", "gptj", &kGptjNames, read_gptj_config},
    {"Gemma2ForCausalLM", "gemma2", &kGemmaNames, read_gemma_config},
    {"Gemma3ForCausalLM", "gemma3", &kGemmaNames, read_gemma_config},
};

const HfArch* find_arch(std::string_view hf_name) {
  for (const HfArch& a : kArchs) {
    if (a.hf_name == hf_name) return &a;
  }
  return nullptr;
}

// HF parameter name -> canonical name; empty for buffers that carry no weights.
// Names that match nothing are kept as they are, so that the tensor check refuses them.
std::string canonical_name(const HfNames& names, const std::string& hf) {
  for (const auto& [from, to] : names.globals) {
    if (hf == from) return std::string(to);
  }
  const std::string_view prefix = names.layer_prefix;
  if (hf.starts_with(prefix)) {
    const size_t dot = hf.find('.', prefix.size());
    if (dot != std::string::npos && dot > prefix.size() && dot - prefix.size() <= 4) {
      const std::string index = hf.substr(prefix.size(), dot - prefix.size());
      const std::string_view rest = std::string_view(hf).substr(dot + 1);
      if (index.find_first_not_of("0123456789") == std::string::npos) {
        for (std::string_view b : names.buffers) {
          if (rest == b) return "";
        }
        for (const auto& [from, to] : names.layers) {
          if (rest == from) return fmt::format("blk.{}.{}", std::stoi(index), to);
        }
        for (const auto& [from, to] : names.moe_layers) {
          if (rest == from) return fmt::format("blk.{}.{}", std::stoi(index), to);
        }
        if (!names.experts_prefix.empty() && rest.starts_with(names.experts_prefix)) {
          const std::string_view tail = rest.substr(names.experts_prefix.size());
          const size_t edot = tail.find('.');
          const std::string_view expert = tail.substr(0, edot);
          if (edot != std::string_view::npos && !expert.empty() && expert.size() <= 4 &&
              expert.find_first_not_of("0123456789") == std::string_view::npos) {
            for (const auto& [from, to] : names.experts) {
              if (tail.substr(edot + 1) == from) return fmt::format("blk.{}.{}.{}.weight", std::stoi(index), to, expert);
            }
          }
        }
      }
    }
  }
  return hf;
}

Result<int32_t> get_int(const boost::json::object& cfg, std::string_view key, std::optional<int64_t> fallback) {
  HEARTH_ASSIGN_OR_RETURN(auto v, json_opt_int(cfg, key));
  if (!v) {
    if (fallback) return static_cast<int32_t>(*fallback);
    return make_error(ErrorCode::kFormat, "config.json has no \"{}\"", key);
  }
  if (*v < 0 || *v > INT32_MAX) return make_error(ErrorCode::kFormat, "config.json \"{}\" is {}", key, *v);
  return static_cast<int32_t>(*v);
}

// eos_token_id may be one id or a list of ids.
Status append_ids(const boost::json::object& obj, std::string_view key, std::vector<TokenId>& out) {
  const auto it = obj.find(boost::json::string_view(key.data(), key.size()));
  if (it == obj.end() || it->value().is_null()) return Status::ok();
  auto push = [&](const boost::json::value& v) -> Status {
    if (!v.is_int64() || v.as_int64() < 0 || v.as_int64() > INT32_MAX) {
      return make_error(ErrorCode::kFormat, "\"{}\" must be a token id or a list of them", key);
    }
    const auto id = static_cast<TokenId>(v.as_int64());
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    return Status::ok();
  };
  if (it->value().is_array()) {
    for (const auto& v : it->value().as_array()) HEARTH_RETURN_IF_ERROR(push(v));
    return Status::ok();
  }
  return push(it->value());
}

// Config fields that change the math of a family that does not have them: refused by
// name rather than ignored (a false, null, zero or empty value is their absence).
constexpr std::string_view kUnimplementedFields[] = {
    "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "sliding_window_pattern",
    "n_routed_experts",       "n_shared_experts",        "num_shared_experts",    "shared_expert_intermediate_size",
    "first_k_dense_replace",  "mlp_only_layers",         "use_qk_norm",           "alibi",
    "use_alibi",              "embedding_multiplier",    "logits_scaling",        "residual_multiplier",
    "attention_multiplier",   "clip_qkv",
};
// What a dense family does not implement, and a mixture of experts does.
constexpr std::string_view kExpertFields[] = {"num_experts", "num_local_experts", "moe_intermediate_size"};

Status refuse_unimplemented(const boost::json::object& cfg, std::string_view arch, bool moe) {
  std::vector<std::string_view> keys(std::begin(kUnimplementedFields), std::end(kUnimplementedFields));
  if (!moe) keys.insert(keys.end(), std::begin(kExpertFields), std::end(kExpertFields));
  for (std::string_view key : keys) {
    if (arch == "Qwen2MoeForCausalLM" && key == "shared_expert_intermediate_size") continue;  // read_experts'
    if (arch == "Glm4MoeForCausalLM" && (key == "n_routed_experts" || key == "n_shared_experts" ||
                                         key == "first_k_dense_replace" || key == "use_qk_norm")) {
      continue;  // read_glm4moe_config's
    }
    if (arch.starts_with("Gemma") && (key == "query_pre_attn_scalar" || key == "sliding_window_pattern" ||
                                      key == "attn_logit_softcapping" || key == "final_logit_softcapping")) {
      continue;  // read_gemma_config's
    }
    const auto it = cfg.find(boost::json::string_view(key.data(), key.size()));
    if (it == cfg.end()) continue;
    const boost::json::value& v = it->value();
    const bool absent = v.is_null() || (v.is_bool() && !v.as_bool()) || (v.is_int64() && v.as_int64() == 0) ||
                        (v.is_uint64() && v.as_uint64() == 0) || (v.is_double() && v.as_double() == 0.0) ||
                        (v.is_array() && v.as_array().empty());
    if (!absent) {
      return make_error(ErrorCode::kUnsupported,
                        "\"{}\" is set, and hearth's {} does not implement it; refusing to run the model without it",
                        key, arch);
    }
  }
  return Status::ok();
}

Status read_rope_scaling(const boost::json::object& cfg, ModelConfig& c) {
  const auto* rs = json_find_object(cfg, "rope_scaling");
  if (rs == nullptr) return Status::ok();
  HEARTH_ASSIGN_OR_RETURN(auto type, json_opt_string(*rs, "rope_type"));
  if (!type) {
    HEARTH_ASSIGN_OR_RETURN(type, json_opt_string(*rs, "type"));
  }
  HEARTH_ASSIGN_OR_RETURN(auto factor, json_opt_number(*rs, "factor"));
  const std::string t = type.value_or("default");
  if (t == "linear") {
    c.rope_scaling.type = RopeScalingType::kLinear;
    c.rope_scaling.factor = static_cast<float>(factor.value_or(1.0));
  } else if (t == "llama3") {
    c.rope_scaling.type = RopeScalingType::kLlama3;
    c.rope_scaling.factor = static_cast<float>(factor.value_or(8.0));
    HEARTH_ASSIGN_OR_RETURN(auto lo, json_opt_number(*rs, "low_freq_factor"));
    HEARTH_ASSIGN_OR_RETURN(auto hi, json_opt_number(*rs, "high_freq_factor"));
    HEARTH_ASSIGN_OR_RETURN(auto orig, json_opt_int(*rs, "original_max_position_embeddings"));
    c.rope_scaling.low_freq_factor = static_cast<float>(lo.value_or(1.0));
    c.rope_scaling.high_freq_factor = static_cast<float>(hi.value_or(4.0));
    c.rope_scaling.original_context = static_cast<int32_t>(std::clamp<int64_t>(orig.value_or(8192), 0, INT32_MAX));
  } else if (t != "default") {
    return make_error(ErrorCode::kUnsupported,
                      "rope_scaling type \"{}\" is not supported (linear and llama3 are)", t);
  }
  return Status::ok();
}

// The activation a config names: silu, gelu (exact), or one of the tanh forms.
Result<Activation> read_activation(const boost::json::object& cfg, std::string_view key, std::string_view fallback) {
  HEARTH_ASSIGN_OR_RETURN(auto act, json_opt_string(cfg, key));
  const std::string a = act.value_or(std::string(fallback));
  if (a == "silu" || a == "swish") return Activation::kSilu;
  if (a == "gelu") return Activation::kGelu;
  if (a == "gelu_new" || a == "gelu_fast" || a == "gelu_pytorch_tanh") return Activation::kGeluTanh;
  return make_error(ErrorCode::kUnsupported, "{} \"{}\" is not supported (silu, gelu, gelu_new, gelu_pytorch_tanh are)",
                    key, a);
}

// partial_rotary_factor / rotary_pct: the share of a head RoPE rotates.
Status read_rotary_share(const boost::json::object& cfg, std::string_view key, double fallback, ModelConfig& c) {
  HEARTH_ASSIGN_OR_RETURN(auto share, json_opt_number(cfg, key));
  const double f = share.value_or(fallback);
  if (!(f > 0.0 && f <= 1.0)) return make_error(ErrorCode::kFormat, "\"{}\" is {}, not in (0, 1]", key, f);
  const auto dims = static_cast<int32_t>(static_cast<double>(c.head_dim) * f);
  c.rotary_dim = dims == c.head_dim ? 0 : dims;
  return Status::ok();
}

// Qwen2-MoE's, Qwen3-MoE's and Mixtral's experts: how many, how many per token, of what
// size, and Qwen2-MoE's shared expert.
Status read_experts(const boost::json::object& cfg, ModelConfig& c) {
  const bool qwen = c.architecture != "mixtral";
  HEARTH_ASSIGN_OR_RETURN(c.n_experts, get_int(cfg, qwen ? "num_experts" : "num_local_experts", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_experts_used, get_int(cfg, "num_experts_per_tok", std::nullopt));
  if (qwen) {
    HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_int(cfg, "moe_intermediate_size", std::nullopt));
    HEARTH_ASSIGN_OR_RETURN(auto norm, json_opt_bool(cfg, "norm_topk_prob"));
    c.moe_normalize = norm.value_or(false);
    HEARTH_ASSIGN_OR_RETURN(auto step, json_opt_int(cfg, "decoder_sparse_step"));
    if (step.value_or(1) != 1) {
      return make_error(ErrorCode::kUnsupported, "\"decoder_sparse_step\" {} (dense layers between expert layers) is "
                        "not implemented", *step);
    }
    if (c.architecture == "qwen2moe") {
      HEARTH_ASSIGN_OR_RETURN(c.shared_expert_dim, get_int(cfg, "shared_expert_intermediate_size", std::nullopt));
      c.shared_expert_gate = c.shared_expert_dim > 0;  // Qwen2MoeSparseMoeBlock always gates it
    }
  } else {
    c.moe_normalize = true;  // Mixtral renormalises its top-k weights
  }
  return Status::ok();
}

// The sizes Llama's config spelling names (Qwen, Mistral, Gemma 3 spell them alike).
Status read_llama_shape(const boost::json::object& cfg, ModelConfig& c) {
  HEARTH_ASSIGN_OR_RETURN(c.vocab_size, get_int(cfg, "vocab_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.dim, get_int(cfg, "hidden_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_int(cfg, "intermediate_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_layers, get_int(cfg, "num_hidden_layers", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_heads, get_int(cfg, "num_attention_heads", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_kv_heads, get_int(cfg, "num_key_value_heads", c.n_heads));
  if (c.n_heads == 0) return make_error(ErrorCode::kFormat, "config.json num_attention_heads is 0");
  return Status::ok();
}

// The rest of what Llama's config spelling names, with the defaults a family's config
// class gives them: head size, rotary share, context, norm epsilon, RoPE base, tying.
struct LlamaDefaults {
  double rotary_share;
  int32_t context;
  double norm_eps;
};
Status read_llama_body(const boost::json::object& cfg, const LlamaDefaults& d, ModelConfig& c) {
  HEARTH_RETURN_IF_ERROR(read_llama_shape(cfg, c));
  HEARTH_ASSIGN_OR_RETURN(c.head_dim, get_int(cfg, "head_dim", c.dim / c.n_heads));
  HEARTH_RETURN_IF_ERROR(read_rotary_share(cfg, "partial_rotary_factor", d.rotary_share, c));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_int(cfg, "max_position_embeddings", d.context));
  HEARTH_ASSIGN_OR_RETURN(auto eps, json_opt_number(cfg, "rms_norm_eps"));
  c.norm_eps = static_cast<float>(eps.value_or(d.norm_eps));
  HEARTH_ASSIGN_OR_RETURN(auto theta, json_opt_number(cfg, "rope_theta"));
  c.rope_theta = static_cast<float>(theta.value_or(10000.0));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(cfg, "tie_word_embeddings"));
  c.tied_embeddings = tied.value_or(false);
  return Status::ok();
}

Status read_llama_config(const boost::json::object& cfg, ModelConfig& c) {
  c.qkv_bias = c.architecture == "qwen2" || c.architecture == "qwen2moe";
  c.qk_norm = c.architecture == "qwen3" || c.architecture == "qwen3moe";
  c.rope_style = RopeStyle::kHalf;  // HF checkpoints are laid out for rotate_half

  HEARTH_ASSIGN_OR_RETURN(c.activation, read_activation(cfg, "hidden_act", "silu"));
  HEARTH_ASSIGN_OR_RETURN(auto attention_bias, json_opt_bool(cfg, "attention_bias"));
  HEARTH_ASSIGN_OR_RETURN(auto mlp_bias, json_opt_bool(cfg, "mlp_bias"));
  if (attention_bias.value_or(false)) {
    // Llama's attention_bias: q, k, v and o (Qwen2's bias is on q, k and v only, always).
    c.attn_output_bias = !c.qkv_bias;
    c.qkv_bias = true;
  }
  c.ffn_bias = mlp_bias.value_or(false);
  HEARTH_RETURN_IF_ERROR(read_llama_body(cfg, {1.0, 2048, 1e-6}, c));

  HEARTH_ASSIGN_OR_RETURN(auto use_sliding, json_opt_bool(cfg, "use_sliding_window"));
  HEARTH_ASSIGN_OR_RETURN(auto window, json_opt_int(cfg, "sliding_window"));
  if (window && use_sliding.value_or(true) && *window > 0 && *window < c.max_context) {
    if (c.architecture.starts_with("qwen")) {
      // Qwen's sliding window covers only the layers from max_window_layers on.
      HEARTH_ASSIGN_OR_RETURN(auto from, json_opt_int(cfg, "max_window_layers"));
      if (from && *from < c.n_layers) {
        return make_error(ErrorCode::kUnsupported, "use_sliding_window with max_window_layers {} of {} layers (a "
                          "window on some layers only) is not implemented", *from, c.n_layers);
      }
    } else {
      c.sliding_window = static_cast<int32_t>(std::min<int64_t>(*window, INT32_MAX));
    }
  }
  if (c.architecture == "qwen3moe" || c.architecture == "qwen2moe" || c.architecture == "mixtral") {
    HEARTH_RETURN_IF_ERROR(read_experts(cfg, c));
  }
  return read_rope_scaling(cfg, c);
}

Status read_neox_config(const boost::json::object& cfg, ModelConfig& c) {
  c.norm = NormKind::kLayer;
  c.gated_ffn = false;
  c.rope_style = RopeStyle::kHalf;
  HEARTH_ASSIGN_OR_RETURN(c.activation, read_activation(cfg, "hidden_act", "gelu"));
  HEARTH_ASSIGN_OR_RETURN(auto parallel, json_opt_bool(cfg, "use_parallel_residual"));
  c.residual = parallel.value_or(true) ? Residual::kParallel : Residual::kSequential;
  HEARTH_ASSIGN_OR_RETURN(auto attention_bias, json_opt_bool(cfg, "attention_bias"));
  c.qkv_bias = c.attn_output_bias = attention_bias.value_or(true);
  c.ffn_bias = true;
  HEARTH_ASSIGN_OR_RETURN(c.vocab_size, get_int(cfg, "vocab_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.dim, get_int(cfg, "hidden_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_int(cfg, "intermediate_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_layers, get_int(cfg, "num_hidden_layers", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_heads, get_int(cfg, "num_attention_heads", std::nullopt));
  if (c.n_heads == 0) return make_error(ErrorCode::kFormat, "config.json num_attention_heads is 0");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.dim / c.n_heads;
  HEARTH_RETURN_IF_ERROR(read_rotary_share(cfg, "rotary_pct", 0.25, c));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_int(cfg, "max_position_embeddings", 2048));
  HEARTH_ASSIGN_OR_RETURN(auto eps, json_opt_number(cfg, "layer_norm_eps"));
  c.norm_eps = static_cast<float>(eps.value_or(1e-5));
  HEARTH_ASSIGN_OR_RETURN(auto theta, json_opt_number(cfg, "rotary_emb_base"));
  if (!theta) {
    HEARTH_ASSIGN_OR_RETURN(theta, json_opt_number(cfg, "rope_theta"));
  }
  c.rope_theta = static_cast<float>(theta.value_or(10000.0));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(cfg, "tie_word_embeddings"));
  c.tied_embeddings = tied.value_or(false);
  return read_rope_scaling(cfg, c);
}

Status read_gptj_config(const boost::json::object& cfg, ModelConfig& c) {
  c.norm = NormKind::kLayer;
  c.gated_ffn = false;
  c.residual = Residual::kParallelSharedNorm;
  c.rope_style = RopeStyle::kInterleaved;  // rotate_every_two
  c.ffn_bias = true;
  c.output_bias = true;
  HEARTH_ASSIGN_OR_RETURN(c.activation, read_activation(cfg, "activation_function", "gelu_new"));
  HEARTH_ASSIGN_OR_RETURN(c.vocab_size, get_int(cfg, "vocab_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.dim, get_int(cfg, "n_embd", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(auto inner, json_opt_int(cfg, "n_inner"));
  c.hidden_dim = static_cast<int32_t>(std::clamp<int64_t>(inner.value_or(4 * static_cast<int64_t>(c.dim)), 0, INT32_MAX));
  HEARTH_ASSIGN_OR_RETURN(c.n_layers, get_int(cfg, "n_layer", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_heads, get_int(cfg, "n_head", std::nullopt));
  if (c.n_heads == 0) return make_error(ErrorCode::kFormat, "config.json n_head is 0");
  c.n_kv_heads = c.n_heads;
  c.head_dim = c.dim / c.n_heads;
  HEARTH_ASSIGN_OR_RETURN(auto rotary, json_opt_int(cfg, "rotary_dim"));
  if (rotary && *rotary != c.head_dim) c.rotary_dim = static_cast<int32_t>(std::clamp<int64_t>(*rotary, -1, INT32_MAX));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_int(cfg, "n_positions", 2048));
  HEARTH_ASSIGN_OR_RETURN(auto eps, json_opt_number(cfg, "layer_norm_epsilon"));
  c.norm_eps = static_cast<float>(eps.value_or(1e-5));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(cfg, "tie_word_embeddings"));
  c.tied_embeddings = tied.value_or(false);
  if (c.tied_embeddings) {
    return make_error(ErrorCode::kUnsupported, "tie_word_embeddings with GPT-J's lm_head bias is not implemented");
  }
  return Status::ok();
}

// Gemma 2 and Gemma 3 (text): what they share, and where they differ (q/k norms and a
// RoPE base of the windowed layers' own in Gemma 3, one global layer in two in Gemma 2;
// soft-capping where the config sets it, as Gemma 2's does by default).
Status read_gemma_config(const boost::json::object& cfg, ModelConfig& c) {
  const bool gemma2 = c.architecture == "gemma2";
  c.qk_norm = !gemma2;
  c.sandwich_norm = true;
  c.tied_embeddings = true;
  c.rope_style = RopeStyle::kHalf;
  HEARTH_ASSIGN_OR_RETURN(c.activation, read_activation(cfg, "hidden_activation", "gelu_pytorch_tanh"));
  HEARTH_RETURN_IF_ERROR(read_llama_shape(cfg, c));
  HEARTH_ASSIGN_OR_RETURN(c.head_dim, get_int(cfg, "head_dim", 256));
  HEARTH_ASSIGN_OR_RETURN(c.max_context, get_int(cfg, "max_position_embeddings", 32768));
  HEARTH_ASSIGN_OR_RETURN(auto eps, json_opt_number(cfg, "rms_norm_eps"));
  c.norm_eps = static_cast<float>(eps.value_or(1e-6));
  HEARTH_ASSIGN_OR_RETURN(auto theta, json_opt_number(cfg, "rope_theta"));
  c.rope_theta = static_cast<float>(theta.value_or(gemma2 ? 10000.0 : 1000000.0));
  if (!gemma2) {
    HEARTH_ASSIGN_OR_RETURN(auto local_theta, json_opt_number(cfg, "rope_local_base_freq"));
    c.rope_local_theta = static_cast<float>(local_theta.value_or(10000.0));
  }
  HEARTH_ASSIGN_OR_RETURN(auto scalar, json_opt_number(cfg, "query_pre_attn_scalar"));
  if (scalar && !(*scalar > 0.0)) return make_error(ErrorCode::kFormat, "\"query_pre_attn_scalar\" is {}", *scalar);
  c.attention_scale = static_cast<float>(1.0 / std::sqrt(scalar.value_or(256.0)));
  // Soft-capping: a null is none; an absent field is the family's default (Gemma 2's
  // config class defaults to 50 and 30, Gemma 3's to none).
  for (auto [key, fallback, out] : {std::tuple{"attn_logit_softcapping", 50.0, &c.attn_softcap},
                                    std::tuple{"final_logit_softcapping", 30.0, &c.final_softcap}}) {
    HEARTH_ASSIGN_OR_RETURN(auto cap, json_opt_number(cfg, key));
    const bool present = cfg.contains(key);
    const double v = cap ? *cap : (gemma2 && !present ? fallback : 0.0);
    if (!(v >= 0.0) || !std::isfinite(v)) return make_error(ErrorCode::kFormat, "\"{}\" is {}", key, v);
    *out = static_cast<float>(v);
  }
  // The embeddings times sqrt(hidden_size), in float (transformers rounds the factor to
  // the checkpoint's dtype first: 34.0 rather than 33.94 for a bf16 1152).
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(cfg, "tie_word_embeddings"));
  c.tied_embeddings = tied.value_or(true);
  HEARTH_ASSIGN_OR_RETURN(auto window, json_opt_int(cfg, "sliding_window"));
  c.sliding_window = static_cast<int32_t>(std::clamp<int64_t>(window.value_or(4096), 0, INT32_MAX));
  // Which layers are windowed: every sliding_window_pattern-th one global, or the same
  // spelled out in layer_types.
  HEARTH_ASSIGN_OR_RETURN(auto pattern, json_opt_int(cfg, "sliding_window_pattern"));
  c.sliding_window_pattern = static_cast<int32_t>(std::clamp<int64_t>(pattern.value_or(gemma2 ? 2 : 6), 0, 1024));
  if (const auto* types = json_find_array(cfg, "layer_types")) {
    int32_t period = 0;
    for (size_t i = 0; i < types->size(); ++i) {
      if ((*types)[i].is_string() && (*types)[i].as_string() == "full_attention") {
        period = static_cast<int32_t>(i) + 1;
        break;
      }
    }
    for (size_t i = 0; i < types->size(); ++i) {
      const bool full = (*types)[i].is_string() && (*types)[i].as_string() == "full_attention";
      if (period == 0 || full != ((static_cast<int32_t>(i) + 1) % period == 0)) {
        return make_error(ErrorCode::kUnsupported, "\"layer_types\" is not a global layer every N layers; other "
                          "orders are not implemented");
      }
    }
    c.sliding_window_pattern = period;
  }
  return read_rope_scaling(cfg, c);
}

// GLM-4.5 (Glm4MoeForCausalLM): Qwen-like attention (q/k/v biases, optional q/k norms)
// with half of each head rotated, the first first_k_dense_replace layers dense, the others
// DeepSeek V3's mixture: sigmoid scores, the k chosen by score plus
// e_score_correction_bias, their weights renormalised and times routed_scaling_factor,
// beside n_shared_experts ungated shared experts.
Status read_glm4moe_config(const boost::json::object& cfg, ModelConfig& c) {
  c.rope_style = RopeStyle::kHalf;
  HEARTH_ASSIGN_OR_RETURN(c.activation, read_activation(cfg, "hidden_act", "silu"));
  HEARTH_ASSIGN_OR_RETURN(auto attention_bias, json_opt_bool(cfg, "attention_bias"));
  c.qkv_bias = attention_bias.value_or(false);  // q, k and v; the output projection has none
  HEARTH_ASSIGN_OR_RETURN(auto qk_norm, json_opt_bool(cfg, "use_qk_norm"));
  c.qk_norm = qk_norm.value_or(false);
  HEARTH_RETURN_IF_ERROR(read_llama_body(cfg, {0.5, 131072, 1e-5}, c));
  const int32_t dense = c.hidden_dim;  // intermediate_size: the dense layers'

  HEARTH_ASSIGN_OR_RETURN(auto routed, json_opt_int(cfg, "n_routed_experts"));
  if (!routed) {
    HEARTH_ASSIGN_OR_RETURN(routed, json_opt_int(cfg, "num_experts"));
  }
  if (!routed || *routed < 1 || *routed > 1024) {
    return make_error(ErrorCode::kFormat, "config.json needs \"n_routed_experts\" (1..1024)");
  }
  c.n_experts = static_cast<int32_t>(*routed);
  HEARTH_ASSIGN_OR_RETURN(c.n_experts_used, get_int(cfg, "num_experts_per_tok", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.hidden_dim, get_int(cfg, "moe_intermediate_size", std::nullopt));
  HEARTH_ASSIGN_OR_RETURN(c.n_dense_layers, get_int(cfg, "first_k_dense_replace", 1));
  c.dense_hidden_dim = c.n_dense_layers > 0 ? dense : 0;
  HEARTH_ASSIGN_OR_RETURN(const int32_t shared, get_int(cfg, "n_shared_experts", 1));
  if (shared > 64) return make_error(ErrorCode::kFormat, "\"n_shared_experts\" is {}", shared);
  c.shared_expert_dim = shared * c.hidden_dim;
  HEARTH_ASSIGN_OR_RETURN(auto norm, json_opt_bool(cfg, "norm_topk_prob"));
  c.moe_normalize = norm.value_or(true);
  HEARTH_ASSIGN_OR_RETURN(auto scale, json_opt_number(cfg, "routed_scaling_factor"));
  c.routed_scale = static_cast<float>(scale.value_or(1.0));
  c.router_sigmoid = true;
  c.router_bias = true;
  HEARTH_ASSIGN_OR_RETURN(auto groups, json_opt_int(cfg, "n_group"));
  HEARTH_ASSIGN_OR_RETURN(auto topk_groups, json_opt_int(cfg, "topk_group"));
  if (groups.value_or(1) > 1 && topk_groups.value_or(1) < *groups) {
    return make_error(ErrorCode::kUnsupported, "\"n_group\" {} with \"topk_group\" {} (experts chosen from some "
                      "groups only) is not implemented", *groups, topk_groups.value_or(1));
  }
  return read_rope_scaling(cfg, c);
}

// Gemma's RMSNorm multiplies by (1 + weight): every norm weight of the checkpoint,
// stored as 1 + weight in float32 (what llama.cpp's converter writes into its GGUF), so
// that the engine's RMSNorm computes it.
Status fold_gemma_norms(LoadedModel& model) {
  for (TensorView& t : model.tensors) {
    if (!t.name.ends_with("norm.weight")) continue;
    if (t.n_dims != 1 || (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16)) {
      return make_error(ErrorCode::kFormat, "{} is not a float vector", t.name);
    }
    std::vector<std::byte>& bytes = model.owned.emplace_back(static_cast<size_t>(t.shape[0]) * sizeof(float));
    auto* out = reinterpret_cast<float*>(bytes.data());
    for (int64_t i = 0; i < t.shape[0]; ++i) {
      float v;
      if (t.dtype == DType::kF32) {
        std::memcpy(&v, t.data + i * 4, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, t.data + i * 2, 2);
        v = t.dtype == DType::kF16 ? fp16_to_f32(h) : bf16_to_f32(h);
      }
      out[i] = 1.0f + v;
    }
    t.dtype = DType::kF32;
    t.data = bytes.data();
    t.bytes = bytes.size();
  }
  return Status::ok();
}

Result<const HfArch*> read_config(const boost::json::object& cfg, ModelConfig& c) {
  const auto* archs = json_find_array(cfg, "architectures");
  std::string hf_arch;
  if (archs != nullptr && !archs->empty() && (*archs)[0].is_string()) hf_arch = std::string((*archs)[0].as_string());
  const HfArch* arch = find_arch(hf_arch);
  if (arch == nullptr) {
    std::string known;
    for (const HfArch& a : kArchs) known += fmt::format("{}{}", known.empty() ? "" : ", ", a.hf_name);
    return make_error(ErrorCode::kUnsupported, "architecture \"{}\" is not supported (hearth runs {})",
                      hf_arch.empty() ? "(none given)" : hf_arch, known);
  }
  c.architecture = std::string(arch->name);
  HEARTH_RETURN_IF_ERROR(refuse_unimplemented(cfg, arch->hf_name, !arch->names->experts.empty()));
  HEARTH_RETURN_IF_ERROR(arch->read(cfg, c));
  return arch;
}

bool safe_file_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
         name.find('\0') == std::string::npos;
}

}  // namespace

bool hf_norms_offset_by_one(std::string_view architecture) {
  for (const HfArch& a : kArchs) {
    if (a.name == architecture) return a.names == &kGemmaNames;
  }
  return false;
}

std::optional<std::string> hf_parameter_name(const std::string& canonical, std::string_view architecture) {
  const HfNames* names = nullptr;
  for (const HfArch& a : kArchs) {
    if (a.name == architecture) names = a.names;
  }
  if (names == nullptr) return std::nullopt;
  for (const auto& [hf, ours] : names->globals) {
    if (canonical == ours) return std::string(hf);
  }
  constexpr std::string_view kPrefix = "blk.";
  if (!canonical.starts_with(kPrefix)) return std::nullopt;
  const size_t dot = canonical.find('.', kPrefix.size());
  if (dot == std::string::npos) return std::nullopt;
  const std::string index = canonical.substr(kPrefix.size(), dot - kPrefix.size());
  if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const std::string_view rest = std::string_view(canonical).substr(dot + 1);
  for (const auto& [hf, ours] : names->layers) {
    if (rest == ours) return fmt::format("{}{}.{}", names->layer_prefix, index, hf);
  }
  for (const auto& [hf, ours] : names->moe_layers) {
    if (rest == ours) return fmt::format("{}{}.{}", names->layer_prefix, index, hf);
  }
  // An expert's matrix: "<canonical>.E.weight".
  const size_t edot = rest.find('.');
  const size_t wdot = edot == std::string_view::npos ? edot : rest.find('.', edot + 1);
  if (wdot != std::string_view::npos && rest.substr(wdot) == ".weight") {
    const std::string_view stem = rest.substr(0, edot), expert = rest.substr(edot + 1, wdot - edot - 1);
    if (!expert.empty() && expert.find_first_not_of("0123456789") == std::string_view::npos) {
      for (const auto& [hf, ours] : names->experts) {
        if (stem == ours) return fmt::format("{}{}.{}{}.{}", names->layer_prefix, index, names->experts_prefix, expert, hf);
      }
    }
  }
  return std::nullopt;
}

namespace {

// A sentence-transformers checkpoint's pooling (1_Pooling/config.json): the one mode it
// turns on; kNone when there is no such file. Modes hearth does not pool by (max, weighted
// mean, several at once) are refused.
Result<Pooling> sentence_transformers_pooling(const std::filesystem::path& dir) {
  const auto path = dir / "1_Pooling" / "config.json";
  if (!std::filesystem::exists(path)) return Pooling::kNone;
  HEARTH_ASSIGN_OR_RETURN(std::string text, read_small_file(path, kMaxConfigBytes));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value doc, json_parse(text, "1_Pooling/config.json"));
  if (!doc.is_object()) return make_error(ErrorCode::kFormat, "1_Pooling/config.json is not a JSON object");
  Pooling found = Pooling::kNone;
  int on = 0;
  for (const auto& [key, value] : doc.as_object()) {
    if (!key.starts_with("pooling_mode_") || !value.is_bool() || !value.as_bool()) continue;
    ++on;
    if (key == "pooling_mode_mean_tokens") {
      found = Pooling::kMean;
    } else if (key == "pooling_mode_lasttoken") {
      found = Pooling::kLast;
    } else if (key == "pooling_mode_cls_token") {
      found = Pooling::kFirst;
    } else {
      return make_error(ErrorCode::kUnsupported, "1_Pooling/config.json: {} is not supported (mean, last token and "
                        "cls pooling are)", std::string(key));
    }
  }
  if (on > 1) return make_error(ErrorCode::kUnsupported, "1_Pooling/config.json turns on {} pooling modes; hearth pools by one", on);
  return found;
}

}  // namespace

Result<LoadedModel> hf_model_open(const std::filesystem::path& dir) {
  LoadedModel model;
  model.format = ModelFormat::kSafetensors;
  const auto abs_dir = std::filesystem::absolute(dir).lexically_normal();
  model.name = abs_dir.has_filename() ? abs_dir.filename().string() : abs_dir.parent_path().filename().string();

  HEARTH_ASSIGN_OR_RETURN(std::string config_text, read_small_file(dir / "config.json", kMaxConfigBytes));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value config_json, json_parse(config_text, "config.json"));
  if (!config_json.is_object()) return make_error(ErrorCode::kFormat, "config.json is not a JSON object");
  const auto& cfg = config_json.as_object();
  auto arch = read_config(cfg, model.config);
  if (!arch.is_ok()) return arch.status().with_context("config.json");
  const HfNames& names = *(*arch)->names;
  // Layers past num_hidden_layers are multi-token-prediction heads (GLM-4.5's
  // num_nextn_predict_layers), a draft model that transformers, like hearth, does not run.
  HEARTH_ASSIGN_OR_RETURN(auto nextn, json_opt_int(cfg, "num_nextn_predict_layers"));
  const int64_t n_layers = model.config.n_layers, extra = std::clamp<int64_t>(nextn.value_or(0), 0, 16);
  auto canonical = [&names, n_layers, extra](const std::string& hf) -> std::string {
    for (int64_t i = n_layers; i < n_layers + extra; ++i) {
      if (hf.starts_with(fmt::format("{}{}.", names.layer_prefix, i))) return "";
    }
    return canonical_name(names, hf);
  };
  HEARTH_ASSIGN_OR_RETURN(const std::optional<PrequantConfig> prequant, prequant_config(cfg));
  HEARTH_ASSIGN_OR_RETURN(model.config.pooling, sentence_transformers_pooling(dir));

  // Which files hold the weights: the shard index when there is one.
  std::vector<std::string> shard_files;
  const auto index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string index_text, read_small_file(index_path, kMaxConfigBytes));
    HEARTH_ASSIGN_OR_RETURN(boost::json::value index, json_parse(index_text, "model.safetensors.index.json"));
    const auto* map = index.is_object() ? json_find_object(index.as_object(), "weight_map") : nullptr;
    if (map == nullptr) return make_error(ErrorCode::kFormat, "model.safetensors.index.json has no weight_map");
    std::set<std::string> unique;
    for (const auto& [name, file] : *map) {
      if (!file.is_string() || !safe_file_name(std::string(file.as_string()))) {
        return make_error(ErrorCode::kFormat, "model.safetensors.index.json maps {} to an invalid file name",
                          std::string(name));
      }
      unique.insert(std::string(file.as_string()));
    }
    shard_files.assign(unique.begin(), unique.end());
  } else if (std::filesystem::exists(dir / "model.safetensors")) {
    shard_files.push_back("model.safetensors");
  } else {
    return make_error(ErrorCode::kNotFound,
                      "{} has neither model.safetensors nor model.safetensors.index.json", dir.string());
  }

  std::set<std::string> seen;
  std::vector<TensorView> int32_tensors;  // the packed words of a pre-quantized checkpoint
  for (const std::string& shard : shard_files) {
    HEARTH_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(dir / shard));
    HEARTH_ASSIGN_OR_RETURN(SafetensorsFile st, safetensors_parse(file.bytes(), shard, prequant.has_value()));
    for (TensorView& t : st.int32_tensors) {
      if (!seen.insert(t.name).second) {
        return make_error(ErrorCode::kFormat, "tensor {} appears in more than one place", t.name);
      }
      int32_tensors.push_back(std::move(t));
    }
    for (TensorView& t : st.tensors) {
      std::string name = canonical(t.name);
      if (name.empty()) continue;
      if (name == "output.weight" && model.config.tied_embeddings) continue;  // transformers ties it anyway
      if (!seen.insert(name).second) {
        return make_error(ErrorCode::kFormat, "tensor {} appears in more than one place", t.name);
      }
      t.name = std::move(name);
      model.tensors.push_back(std::move(t));
    }
    model.files.push_back(std::move(file));
  }
  if (prequant) {
    HEARTH_RETURN_IF_ERROR(prequant_apply(*prequant, std::move(int32_tensors), canonical, model));
  }
  if (&names == &kGemmaNames) HEARTH_RETURN_IF_ERROR(fold_gemma_norms(model));
  if (&names == &kNeoxNames) {
    HEARTH_RETURN_IF_ERROR(split_fused_qkv(model, QkvLayout::kPerHead).with_context("query_key_value"));
  }
  if (!model.config.tied_embeddings && !seen.contains("output.weight")) {
    model.config.tied_embeddings = true;  // no lm_head: the embeddings serve as the output layer
  }

  HEARTH_ASSIGN_OR_RETURN(model.tokenizer, tokenizer_source_from_path(dir));
  model.tokenizer.vocab_size = model.config.vocab_size;
  HEARTH_ASSIGN_OR_RETURN(auto bos, json_opt_int(cfg, "bos_token_id"));
  if (bos && *bos >= 0 && *bos < model.config.vocab_size) model.tokenizer.bos_id = static_cast<TokenId>(*bos);
  HEARTH_RETURN_IF_ERROR(append_ids(cfg, "eos_token_id", model.tokenizer.eos_ids).with_context("config.json"));
  const auto gen_path = dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    HEARTH_ASSIGN_OR_RETURN(std::string gen_text, read_small_file(gen_path, kMaxConfigBytes));
    HEARTH_ASSIGN_OR_RETURN(boost::json::value gen, json_parse(gen_text, "generation_config.json"));
    if (gen.is_object()) {
      HEARTH_RETURN_IF_ERROR(
          append_ids(gen.as_object(), "eos_token_id", model.tokenizer.eos_ids).with_context("generation_config.json"));
    }
  }
  return model;
}

}  // namespace hearth
