#include "common/model_config.h"

#include <cmath>
#include <numbers>

#include <boost/json.hpp>

#include "common/json.h"

namespace hearth {

Status model_config_validate(const ModelConfig& c) {
  auto bad = [](std::string_view what, int64_t value, int64_t lo, int64_t hi) {
    return make_error(ErrorCode::kFormat, "model config: {} is {}, expected {}..{}", what, value, lo, hi);
  };
  if (c.vocab_size < 1 || c.vocab_size > (1 << 22)) return bad("vocab_size", c.vocab_size, 1, 1 << 22);
  if (c.dim < 1 || c.dim > (1 << 16)) return bad("hidden size", c.dim, 1, 1 << 16);
  if (c.hidden_dim < 1 || c.hidden_dim > (1 << 18)) return bad("feed-forward size", c.hidden_dim, 1, 1 << 18);
  if (c.n_layers < 1 || c.n_layers > 1024) return bad("layer count", c.n_layers, 1, 1024);
  if (c.n_heads < 1 || c.n_heads > 1024) return bad("head count", c.n_heads, 1, 1024);
  if (c.n_kv_heads < 1 || c.n_kv_heads > c.n_heads) return bad("kv head count", c.n_kv_heads, 1, c.n_heads);
  if (c.n_heads % c.n_kv_heads != 0) {
    return make_error(ErrorCode::kFormat, "model config: {} heads are not a multiple of {} kv heads", c.n_heads,
                      c.n_kv_heads);
  }
  if (c.head_dim < 2 || c.head_dim > 1024 || c.head_dim % 2 != 0) {
    return make_error(ErrorCode::kFormat, "model config: head dim {} must be even and in 2..1024", c.head_dim);
  }
  if (c.max_context < 1 || c.max_context > (1 << 24)) return bad("context length", c.max_context, 1, 1 << 24);
  if (!(c.norm_eps > 0.0f) || !std::isfinite(c.norm_eps) || c.norm_eps > 1.0f) {
    return make_error(ErrorCode::kFormat, "model config: rms norm epsilon {} is not in (0, 1]", c.norm_eps);
  }
  if (!(c.rope_theta > 0.0f) || !std::isfinite(c.rope_theta)) {
    return make_error(ErrorCode::kFormat, "model config: rope theta {} is not a positive number", c.rope_theta);
  }
  if (c.rope_scaling.type != RopeScalingType::kNone &&
      (!(c.rope_scaling.factor >= 1.0f) || !std::isfinite(c.rope_scaling.factor))) {
    return make_error(ErrorCode::kFormat, "model config: rope scaling factor {} is not >= 1", c.rope_scaling.factor);
  }
  if (c.rope_scaling.type == RopeScalingType::kLlama3 &&
      (!(c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor) || c.rope_scaling.original_context < 1)) {
    return make_error(ErrorCode::kFormat,
                      "model config: llama3 rope scaling needs high_freq_factor > low_freq_factor and a positive "
                      "original_max_position_embeddings");
  }
  if (c.sliding_window < 0) return bad("sliding window", c.sliding_window, 0, 1 << 24);
  if (c.rotary_dim != 0 && (c.rotary_dim < 2 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)) {
    return make_error(ErrorCode::kFormat, "model config: rotary dim {} must be even and in 2..{} (the head dim)",
                      c.rotary_dim, c.head_dim);
  }
  if (static_cast<uint8_t>(c.norm) > 1 || static_cast<uint8_t>(c.activation) > 2 ||
      static_cast<uint8_t>(c.residual) > 2) {
    return make_error(ErrorCode::kFormat, "model config: unknown norm, activation or residual kind");
  }
  if (c.n_experts < 0 || c.n_experts > 1024 || (c.n_experts > 0 && (c.n_experts_used < 1 || c.n_experts_used > 16 ||
                                                                     c.n_experts_used > c.n_experts))) {
    return make_error(ErrorCode::kFormat, "model config: {} experts with {} used per token (expected 0, or up to 1024 "
                      "experts with 1..16 used)", c.n_experts, c.n_experts_used);
  }
  if (c.n_experts > 0 && !c.gated_ffn) {
    return make_error(ErrorCode::kUnsupported, "model config: ungated experts are not implemented");
  }
  if (!(c.embedding_scale >= 0.0f) || !std::isfinite(c.embedding_scale) || !(c.attention_scale >= 0.0f) ||
      !std::isfinite(c.attention_scale) || !(c.rope_local_theta >= 0.0f) || !std::isfinite(c.rope_local_theta) ||
      c.sliding_window_pattern < 0 || c.sliding_window_pattern > 1024 || !(c.attn_softcap >= 0.0f) ||
      !std::isfinite(c.attn_softcap) || !(c.final_softcap >= 0.0f) || !std::isfinite(c.final_softcap)) {
    return make_error(ErrorCode::kFormat, "model config: a negative or non-finite embedding scale, attention scale, "
                      "local rope theta, sliding window pattern or soft-cap");
  }
  if (c.n_dense_layers < 0 || c.n_dense_layers > c.n_layers || (c.n_dense_layers > 0 && c.n_experts == 0) ||
      c.dense_hidden_dim < 0 || c.dense_hidden_dim > (1 << 20) || (c.n_dense_layers > 0 && c.dense_hidden_dim == 0) ||
      !(c.routed_scale > 0.0f) || !std::isfinite(c.routed_scale) || (c.router_bias && c.n_experts == 0)) {
    return make_error(ErrorCode::kFormat, "model config: {} dense layers of {} before the experts, a routed scale of {}",
                      c.n_dense_layers, c.dense_hidden_dim, c.routed_scale);
  }
  if (c.shared_expert_dim < 0 || c.shared_expert_dim > (1 << 20) || (c.shared_expert_dim > 0 && c.n_experts == 0) ||
      (c.shared_expert_gate && c.shared_expert_dim == 0)) {
    return make_error(ErrorCode::kFormat, "model config: a shared expert of {} (gated: {}) with {} experts",
                      c.shared_expert_dim, c.shared_expert_gate, c.n_experts);
  }
  if (c.sandwich_norm && c.residual != Residual::kSequential) {
    return make_error(ErrorCode::kUnsupported, "model config: block output norms with a parallel residual");
  }
  if (!c.gated_ffn && c.activation == Activation::kSilu) {
    return make_error(ErrorCode::kUnsupported, "model config: an ungated SiLU feed-forward is not implemented");
  }
  return Status::ok();
}

namespace {

constexpr std::string_view kNormNames[] = {"rms", "layer"};
constexpr std::string_view kActivationNames[] = {"silu", "gelu", "gelu_tanh"};
constexpr std::string_view kResidualNames[] = {"sequential", "parallel", "parallel_shared_norm"};

template <size_t N>
int name_index(const std::string_view (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

std::string model_config_summary(const ModelConfig& c) {
  std::string features;
  if (c.tied_embeddings) features += ", tied embeddings";
  if (c.qkv_bias) features += ", qkv bias";
  if (c.qk_norm) features += ", q/k norm";
  if (c.norm == NormKind::kLayer) features += ", layernorm";
  if (c.residual != Residual::kSequential) features += fmt::format(", {} residual", kResidualNames[static_cast<int>(c.residual)]);
  if (c.activation != Activation::kSilu || !c.gated_ffn) {
    features += fmt::format(", {}{}", c.gated_ffn ? "gated " : "", kActivationNames[static_cast<int>(c.activation)]);
  }
  if (c.attn_output_bias || c.ffn_bias || c.output_bias) features += ", biases";
  if (c.n_experts > 0) features += fmt::format(", {} experts, {} per token", c.n_experts, c.n_experts_used);
  if (c.shared_expert_dim > 0) {
    features += fmt::format(", a {}shared expert of {}", c.shared_expert_gate ? "gated " : "", c.shared_expert_dim);
  }
  if (c.router_sigmoid) features += fmt::format(", sigmoid router{}", c.router_bias ? " with bias" : "");
  if (c.routed_scale != 1.0f) features += fmt::format(", routed weights x {}", c.routed_scale);
  if (c.n_dense_layers > 0) features += fmt::format(", {} dense layers of {} first", c.n_dense_layers, c.dense_hidden_dim);
  if (c.attn_softcap > 0.0f) features += fmt::format(", attention soft-cap {}", c.attn_softcap);
  if (c.final_softcap > 0.0f) features += fmt::format(", logit soft-cap {}", c.final_softcap);
  if (c.sandwich_norm) features += ", block output norms";
  if (c.embedding_scale > 0.0f) features += fmt::format(", embeddings x {}", c.embedding_scale);
  if (c.sliding_window > 0) {
    features += c.sliding_window_pattern > 0
                    ? fmt::format(", window {} on {} of every {} layers", c.sliding_window, c.sliding_window_pattern - 1,
                                  c.sliding_window_pattern)
                    : fmt::format(", window {}", c.sliding_window);
  }
  return fmt::format(
      "{}: vocab {}, dim {}, ffn {}, {} layers, {} heads / {} kv heads x {}, context {}, rope theta {} ({}{}{}){}",
      c.architecture, c.vocab_size, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
      c.max_context, c.rope_theta, c.rope_style == RopeStyle::kHalf ? "half" : "interleaved",
      c.rotary() != c.head_dim ? fmt::format(", {} of {} dims", c.rotary(), c.head_dim) : "",
      c.rope_scaling.type == RopeScalingType::kLlama3   ? ", llama3 scaling"
      : c.rope_scaling.type == RopeScalingType::kLinear ? ", linear scaling"
                                                        : "",
      features);
}

std::vector<float> rope_inv_freq(const ModelConfig& c, const float* freq_factors) {
  const int rotary = c.rotary();
  const int half = rotary / 2;
  std::vector<float> out(static_cast<size_t>(half));
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / rotary);
    if (s.type == RopeScalingType::kLinear) {
      freq /= s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
      const double low_wavelen = s.original_context / s.low_freq_factor;
      const double high_wavelen = s.original_context / s.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / freq;
      if (wavelen > low_wavelen) {
        freq /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (s.original_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        freq = (1.0 - smooth) * freq / s.factor + smooth * freq;
      }
    }
    if (freq_factors != nullptr) freq /= freq_factors[i];
    out[static_cast<size_t>(i)] = static_cast<float>(freq);
  }
  return out;
}

std::vector<float> rope_local_inv_freq(const ModelConfig& c) {
  const int rotary = c.rotary();
  std::vector<float> out(static_cast<size_t>(rotary / 2));
  for (int i = 0; i < rotary / 2; ++i) {
    out[static_cast<size_t>(i)] =
        static_cast<float>(1.0 / std::pow(static_cast<double>(c.rope_local_theta), 2.0 * i / rotary));
  }
  return out;
}

std::string model_config_to_json(const ModelConfig& c) {
  boost::json::object o;
  o["architecture"] = c.architecture;
  o["vocab_size"] = c.vocab_size;
  o["dim"] = c.dim;
  o["hidden_dim"] = c.hidden_dim;
  o["n_layers"] = c.n_layers;
  o["n_heads"] = c.n_heads;
  o["n_kv_heads"] = c.n_kv_heads;
  o["head_dim"] = c.head_dim;
  o["max_context"] = c.max_context;
  o["norm_eps"] = c.norm_eps;
  o["rope_theta"] = c.rope_theta;
  o["rope_style"] = c.rope_style == RopeStyle::kHalf ? "half" : "interleaved";
  o["rope_scaling"] = c.rope_scaling.type == RopeScalingType::kLlama3   ? "llama3"
                      : c.rope_scaling.type == RopeScalingType::kLinear ? "linear"
                                                                        : "none";
  o["rope_factor"] = c.rope_scaling.factor;
  o["rope_low_freq_factor"] = c.rope_scaling.low_freq_factor;
  o["rope_high_freq_factor"] = c.rope_scaling.high_freq_factor;
  o["rope_original_context"] = c.rope_scaling.original_context;
  o["tied_embeddings"] = c.tied_embeddings;
  o["qkv_bias"] = c.qkv_bias;
  o["sliding_window"] = c.sliding_window;
  o["norm"] = kNormNames[static_cast<int>(c.norm)];
  o["activation"] = kActivationNames[static_cast<int>(c.activation)];
  o["gated_ffn"] = c.gated_ffn;
  o["residual"] = kResidualNames[static_cast<int>(c.residual)];
  o["rotary_dim"] = c.rotary_dim;
  o["qk_norm"] = c.qk_norm;
  o["attn_output_bias"] = c.attn_output_bias;
  o["ffn_bias"] = c.ffn_bias;
  o["output_bias"] = c.output_bias;
  o["n_experts"] = c.n_experts;
  o["n_experts_used"] = c.n_experts_used;
  o["moe_normalize"] = c.moe_normalize;
  o["embedding_scale"] = c.embedding_scale;
  o["sandwich_norm"] = c.sandwich_norm;
  o["attention_scale"] = c.attention_scale;
  o["sliding_window_pattern"] = c.sliding_window_pattern;
  o["rope_local_theta"] = c.rope_local_theta;
  o["attn_softcap"] = c.attn_softcap;
  o["final_softcap"] = c.final_softcap;
  o["shared_expert_dim"] = c.shared_expert_dim;
  o["shared_expert_gate"] = c.shared_expert_gate;
  o["router_sigmoid"] = c.router_sigmoid;
  o["router_bias"] = c.router_bias;
  o["routed_scale"] = c.routed_scale;
  o["n_dense_layers"] = c.n_dense_layers;
  o["dense_hidden_dim"] = c.dense_hidden_dim;
  o["pooling"] = pooling_name(c.pooling);
  return boost::json::serialize(o);
}

Result<ModelConfig> model_config_from_json(std::string_view json) {
  HEARTH_ASSIGN_OR_RETURN(boost::json::value v, json_parse(json, "the stored model config", 4));
  if (!v.is_object()) return make_error(ErrorCode::kFormat, "the stored model config is not an object");
  const auto& o = v.as_object();
  ModelConfig c;
  auto i32 = [&](std::string_view key, int32_t& out) -> Status {
    HEARTH_ASSIGN_OR_RETURN(const int64_t x, json_int(o, key));
    if (x < INT32_MIN || x > INT32_MAX) return make_error(ErrorCode::kFormat, "{} is out of range", key);
    out = static_cast<int32_t>(x);
    return Status::ok();
  };
  auto f32 = [&](std::string_view key, float& out) -> Status {
    HEARTH_ASSIGN_OR_RETURN(auto x, json_opt_number(o, key));
    if (!x) return make_error(ErrorCode::kFormat, "field \"{}\" is missing", key);
    out = static_cast<float>(*x);
    return Status::ok();
  };
  HEARTH_ASSIGN_OR_RETURN(auto arch, json_opt_string(o, "architecture"));
  c.architecture = arch.value_or("");
  HEARTH_RETURN_IF_ERROR(i32("vocab_size", c.vocab_size));
  HEARTH_RETURN_IF_ERROR(i32("dim", c.dim));
  HEARTH_RETURN_IF_ERROR(i32("hidden_dim", c.hidden_dim));
  HEARTH_RETURN_IF_ERROR(i32("n_layers", c.n_layers));
  HEARTH_RETURN_IF_ERROR(i32("n_heads", c.n_heads));
  HEARTH_RETURN_IF_ERROR(i32("n_kv_heads", c.n_kv_heads));
  HEARTH_RETURN_IF_ERROR(i32("head_dim", c.head_dim));
  HEARTH_RETURN_IF_ERROR(i32("max_context", c.max_context));
  HEARTH_RETURN_IF_ERROR(f32("norm_eps", c.norm_eps));
  HEARTH_RETURN_IF_ERROR(f32("rope_theta", c.rope_theta));
  HEARTH_ASSIGN_OR_RETURN(auto style, json_opt_string(o, "rope_style"));
  c.rope_style = style.value_or("") == "half" ? RopeStyle::kHalf : RopeStyle::kInterleaved;
  HEARTH_ASSIGN_OR_RETURN(auto scaling, json_opt_string(o, "rope_scaling"));
  const std::string sc = scaling.value_or("none");
  c.rope_scaling.type = sc == "llama3" ? RopeScalingType::kLlama3 : sc == "linear" ? RopeScalingType::kLinear
                                                                                  : RopeScalingType::kNone;
  HEARTH_RETURN_IF_ERROR(f32("rope_factor", c.rope_scaling.factor));
  HEARTH_RETURN_IF_ERROR(f32("rope_low_freq_factor", c.rope_scaling.low_freq_factor));
  HEARTH_RETURN_IF_ERROR(f32("rope_high_freq_factor", c.rope_scaling.high_freq_factor));
  HEARTH_RETURN_IF_ERROR(i32("rope_original_context", c.rope_scaling.original_context));
  HEARTH_ASSIGN_OR_RETURN(auto tied, json_opt_bool(o, "tied_embeddings"));
  HEARTH_ASSIGN_OR_RETURN(auto bias, json_opt_bool(o, "qkv_bias"));
  c.tied_embeddings = tied.value_or(false);
  c.qkv_bias = bias.value_or(false);
  HEARTH_RETURN_IF_ERROR(i32("sliding_window", c.sliding_window));
  // The family fields; a config stored before they existed is a Llama-family one.
  auto kind = [&](std::string_view key, const auto& names, auto& out) -> Status {
    HEARTH_ASSIGN_OR_RETURN(auto name, json_opt_string(o, key));
    if (!name) return Status::ok();
    const int i = name_index(names, *name);
    if (i < 0) return make_error(ErrorCode::kFormat, "the stored model config has {} \"{}\"", key, *name);
    out = static_cast<std::remove_reference_t<decltype(out)>>(i);
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(kind("norm", kNormNames, c.norm));
  HEARTH_RETURN_IF_ERROR(kind("activation", kActivationNames, c.activation));
  HEARTH_RETURN_IF_ERROR(kind("residual", kResidualNames, c.residual));
  auto flag = [&](std::string_view key, bool& out) -> Status {
    HEARTH_ASSIGN_OR_RETURN(auto v, json_opt_bool(o, key));
    if (v) out = *v;
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(flag("gated_ffn", c.gated_ffn));
  HEARTH_RETURN_IF_ERROR(flag("qk_norm", c.qk_norm));
  HEARTH_RETURN_IF_ERROR(flag("attn_output_bias", c.attn_output_bias));
  HEARTH_RETURN_IF_ERROR(flag("ffn_bias", c.ffn_bias));
  HEARTH_RETURN_IF_ERROR(flag("output_bias", c.output_bias));
  HEARTH_RETURN_IF_ERROR(flag("moe_normalize", c.moe_normalize));
  HEARTH_RETURN_IF_ERROR(flag("sandwich_norm", c.sandwich_norm));
  HEARTH_RETURN_IF_ERROR(flag("shared_expert_gate", c.shared_expert_gate));
  HEARTH_RETURN_IF_ERROR(flag("router_sigmoid", c.router_sigmoid));
  HEARTH_RETURN_IF_ERROR(flag("router_bias", c.router_bias));
  for (const auto& [key, field] : {std::pair{"embedding_scale", &c.embedding_scale},
                                   std::pair{"attention_scale", &c.attention_scale},
                                   std::pair{"rope_local_theta", &c.rope_local_theta},
                                   std::pair{"attn_softcap", &c.attn_softcap},
                                   std::pair{"final_softcap", &c.final_softcap},
                                   std::pair{"routed_scale", &c.routed_scale}}) {
    if (o.contains(key)) HEARTH_RETURN_IF_ERROR(f32(key, *field));
  }
  for (const auto& [key, field] : {std::pair{"rotary_dim", &c.rotary_dim}, std::pair{"n_experts", &c.n_experts},
                                   std::pair{"n_experts_used", &c.n_experts_used},
                                   std::pair{"sliding_window_pattern", &c.sliding_window_pattern},
                                   std::pair{"shared_expert_dim", &c.shared_expert_dim},
                                   std::pair{"n_dense_layers", &c.n_dense_layers},
                                   std::pair{"dense_hidden_dim", &c.dense_hidden_dim}}) {
    if (o.contains(key)) HEARTH_RETURN_IF_ERROR(i32(key, *field));
  }
  HEARTH_ASSIGN_OR_RETURN(const auto pooling, json_opt_string(o, "pooling"));
  if (pooling && *pooling != "none") {
    const auto p = pooling_from_name(*pooling);
    if (!p) return make_error(ErrorCode::kFormat, "the stored model config has pooling \"{}\"", *pooling);
    c.pooling = *p;
  }
  HEARTH_RETURN_IF_ERROR(model_config_validate(c));
  return c;
}

}  // namespace hearth
