#include "common/model_config.h"

#include <cmath>
#include <numbers>

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
  return Status::ok();
}

std::string model_config_summary(const ModelConfig& c) {
  return fmt::format(
      "{}: vocab {}, dim {}, ffn {}, {} layers, {} heads / {} kv heads x {}, context {}, rope theta {} ({}{}){}{}",
      c.architecture, c.vocab_size, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
      c.max_context, c.rope_theta, c.rope_style == RopeStyle::kHalf ? "half" : "interleaved",
      c.rope_scaling.type == RopeScalingType::kLlama3   ? ", llama3 scaling"
      : c.rope_scaling.type == RopeScalingType::kLinear ? ", linear scaling"
                                                        : "",
      c.tied_embeddings ? ", tied embeddings" : "", c.qkv_bias ? ", qkv bias" : "");
}

std::vector<float> rope_inv_freq(const ModelConfig& c, const float* freq_factors) {
  const int half = c.head_dim / 2;
  std::vector<float> out(static_cast<size_t>(half));
  const RopeScaling& s = c.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double freq = 1.0 / std::pow(static_cast<double>(c.rope_theta), 2.0 * i / c.head_dim);
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

}  // namespace hearth
