#include "kernels/cpu/ops.h"

#include "kernels/cpu/isa.h"
#include "kernels/cpu/ops_impl.h"
#include "kernels/device_math.h"

#include <cmath>
#include <type_traits>

namespace hearth::kernels::cpu {

namespace {

// One row: with Add, row += delta first (in the same pass as the sum of squares), then
// out = row / rms(row) * weight. The eight partial sums and their order are the same
// either way, so the fused and the separate ops give identical bits.
template <bool Add>
void norm_row(std::conditional_t<Add, float*, const float*> row, const float* delta, const float* weight,
              int64_t dim, float eps, float* out) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= dim; i += 8) {
    for (int k = 0; k < 8; ++k) {
      if constexpr (Add) row[i + k] += delta[i + k];
      acc[k] += row[i + k] * row[i + k];
    }
  }
  float ss = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < dim; ++i) {
    if constexpr (Add) row[i] += delta[i];
    ss += row[i] * row[i];
  }
  const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t j = 0; j < dim; ++j) out[j] = weight[j] * (scale * row[j]);
}

}  // namespace

void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) norm_row<false>(x + t * dim, nullptr, weight, dim, eps, out + t * dim);
}

void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) norm_row<true>(x + t * dim, delta + t * dim, weight, dim, eps, out + t * dim);
}

void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* r = x + t * dim;
    float* o = out + t * dim;
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += r[i];
    const float mean = sum / static_cast<float>(dim);
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += (r[i] - mean) * (r[i] - mean);
    const float inv = dev::layer_norm_inv(ss, dim, eps);
    for (int64_t i = 0; i < dim; ++i) o[i] = dev::layer_norm_value(r[i], mean, inv, weight, bias, i);
  }
}

void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = dev::gelu(x[i], tanh_form);
    out[i] = up != nullptr ? g * up[i] : g;
  }
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = dev::softcap(x[i], cap);
}

void moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights) {
  for (int64_t t = 0; t < n; ++t) dev::moe_top_k(logits + t * r.n_experts, r, ids + t * r.k, weights + t * r.k);
}

void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) {
    const float g = dev::sigmoid(gate[t]);
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] *= g;
  }
}

void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                 float* out) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = dev::moe_combine_value(rows, pos + t * k, weights + t * k, k, dim, i);
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, RopeStyle style) {
  const int64_t half = rotary_dim / 2;
  constexpr int64_t kMaxHalf = 512;  // head_dim <= 1024 (ModelConfig validation)
  float cos_v[kMaxHalf], sin_v[kMaxHalf];
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cos_v[i] = std::cos(angle);
      sin_v[i] = std::sin(angle);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      if (style == RopeStyle::kInterleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * cos_v[i] - x1 * sin_v[i];
          v[2 * i + 1] = x0 * sin_v[i] + x1 * cos_v[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * cos_v[i] - x1 * sin_v[i];
          v[i + half] = x0 * sin_v[i] + x1 * cos_v[i];
        }
      }
    }
  }
}

void swiglu_avx512(const float* gate, const float* up, int64_t n, float* out);  // ops_avx512.cpp
double sum_exp_below_avx512(const float* x, int64_t n, float max);
void lora_shrink_avx512(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0,
                        int32_t j1);
void lora_expand_avx512(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0,
                        int64_t o1);
void lora_shrink_avx2(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0,
                      int32_t j1);  // ops_avx2.cpp
void lora_expand_avx2(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0,
                      int64_t o1);

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  if (cpu_isa() == CpuIsa::kAvx512) {
    swiglu_avx512(gate, up, n, out);
  } else {
    swiglu_impl(gate, up, n, out);
  }
}

double sum_exp_below(const float* x, int64_t n, float max) {
  return cpu_isa() == CpuIsa::kAvx512 ? sum_exp_below_avx512(x, n, max) : sum_exp_below_impl(x, n, max);
}

void lora_shrink(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0, int32_t j1) {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: lora_shrink_avx512(p, f, rows, n, j0, j1); break;
    case CpuIsa::kAvx2: lora_shrink_avx2(p, f, rows, n, j0, j1); break;
    default: lora_shrink_impl(p, f, rows, n, j0, j1); break;
  }
}

void lora_expand(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0, int64_t o1) {
  switch (cpu_isa()) {
    case CpuIsa::kAvx512: lora_expand_avx512(p, f, rows, n, o0, o1); break;
    case CpuIsa::kAvx2: lora_expand_avx2(p, f, rows, n, o0, o1); break;
    default: lora_expand_impl(p, f, rows, n, o0, o1); break;
  }
}

void lora_rows(const LoraProduct& p, int64_t t0, int64_t t1) {
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t s = p.row_slot[t];
    if (s < 0 || s >= p.n_slots || p.factors[s].a == nullptr) continue;
    const auto row = static_cast<int32_t>(t);
    lora_shrink(p, p.factors[s], &row, 1, 0, p.factors[s].rank);
    lora_expand(p, p.factors[s], &row, 1, 0, p.out);
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void add_bias(float* x, const float* bias, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] += bias[i];
  }
}

}  // namespace hearth::kernels::cpu
