#include "kernels/reference/reference.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "common/check.h"
#include "common/half.h"
#include "kernels/cpu/repack.h"

namespace hearth::kernels::ref {

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::kF32: {
      const auto* s = static_cast<const float*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < n / kQ8_0BlockSize; ++i) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQ8_0BlockSize; ++j) dst[i * kQ8_0BlockSize + j] = d * static_cast<float>(b[i].qs[j]);
      }
      return;
    }
    case DType::kQ8_0R16:
    case DType::kQ4_0R16:
    case DType::kF16R16:
    case DType::kBF16R16:
      // Interleaved rows are not contiguous: matmul unpacks them; lookups never see them.
      for (int64_t i = 0; i < n; ++i) dst[i] = 0.0f;
      return;
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < n / kQ4_0BlockSize; ++i) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < kQ4_0BlockSize / 2; ++j) {
          dst[i * kQ4_0BlockSize + j] = d * static_cast<float>((b[i].qs[j] & 0x0f) - 8);
          dst[i * kQ4_0BlockSize + j + 16] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
        }
      }
      return;
    }
  }
}

void dequantize_group_quant(const dev::GroupQuantView& m, float* out) {
  const int64_t per_word = 32 / m.bits;
  const uint32_t mask = (1u << m.bits) - 1u;
  for (int64_t c = 0; c < m.cols; ++c) {
    const int64_t g = m.g_idx != nullptr ? m.g_idx[c] : c / m.group_size;
    for (int64_t r = 0; r < m.rows; ++r) {
      const auto word = static_cast<uint32_t>(m.qweight[(c / per_word) * m.rows + r]);
      const auto q = static_cast<int32_t>((word >> ((c % per_word) * m.bits)) & mask);
      const auto zword = static_cast<uint32_t>(m.qzeros[g * (m.rows / per_word) + r / per_word]);
      const auto z = static_cast<int32_t>((zword >> ((r % per_word) * m.bits)) & mask);
      const float scale = fp16_to_f32(m.scales[g * m.rows + r]);
      out[r * m.cols + c] = scale * static_cast<float>(q - z - m.zero_offset);
    }
  }
}

namespace {

// x quantized per 32 values, as integers and one scale per block.
void quantize_blocks(const float* x, int64_t n, std::vector<int32_t>& q, std::vector<float>& d) {
  q.resize(static_cast<size_t>(n));
  d.resize(static_cast<size_t>(n / 32));
  for (int64_t b = 0; b < n / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    d[static_cast<size_t>(b)] = amax / 127.0f;
    const float id = amax != 0.0f ? 1.0f / d[static_cast<size_t>(b)] : 0.0f;
    for (int j = 0; j < 32; ++j) q[static_cast<size_t>(b * 32 + j)] = static_cast<int32_t>(std::nearbyint(x[b * 32 + j] * id));
  }
}

// One quantized weight's integer value and its block's scale.
void weight_ints(DType type, const std::byte* row, int64_t cols, std::vector<int32_t>& q, std::vector<float>& d) {
  q.resize(static_cast<size_t>(cols));
  d.resize(static_cast<size_t>(cols / 32));
  for (int64_t b = 0; b < cols / 32; ++b) {
    if (type == DType::kQ8_0) {
      const auto& blk = reinterpret_cast<const BlockQ8_0*>(row)[b];
      d[static_cast<size_t>(b)] = fp16_to_f32(blk.d);
      for (int j = 0; j < 32; ++j) q[static_cast<size_t>(b * 32 + j)] = blk.qs[j];
    } else {
      const auto& blk = reinterpret_cast<const BlockQ4_0*>(row)[b];
      d[static_cast<size_t>(b)] = fp16_to_f32(blk.d);
      for (int j = 0; j < 16; ++j) {
        q[static_cast<size_t>(b * 32 + j)] = (blk.qs[j] & 0x0f) - 8;
        q[static_cast<size_t>(b * 32 + j + 16)] = (blk.qs[j] >> 4) - 8;
      }
    }
  }
}

}  // namespace

void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y) {
  const DType plain = dtype_plain(type);
  const auto row_bytes = static_cast<int64_t>(*dtype_bytes(plain, cols));
  if (plain == DType::kQ8_0 || plain == DType::kQ4_0) {
    std::vector<int32_t> wq, xq;
    std::vector<float> wd, xd;
    std::vector<std::byte> unpacked(static_cast<size_t>(row_bytes));
    for (int64_t r = 0; r < rows; ++r) {
      const std::byte* row = static_cast<const std::byte*>(w) + r * row_bytes;
      if (plain != type) {
        cpu::unpack_row_r16(type, w, cols, r, unpacked.data());
        row = unpacked.data();
      }
      weight_ints(plain, row, cols, wq, wd);
      for (int64_t t = 0; t < n_tokens; ++t) {
        quantize_blocks(x + t * cols, cols, xq, xd);
        float sum = 0.0f;
        for (int64_t b = 0; b < cols / 32; ++b) {
          int32_t isum = 0;
          for (int j = 0; j < 32; ++j) isum += wq[static_cast<size_t>(b * 32 + j)] * xq[static_cast<size_t>(b * 32 + j)];
          sum += (wd[static_cast<size_t>(b)] * xd[static_cast<size_t>(b)]) * static_cast<float>(isum);
        }
        y[t * rows + r] = sum;
      }
    }
    return;
  }
  std::vector<float> row(static_cast<size_t>(cols));
  std::vector<std::byte> unpacked(static_cast<size_t>(row_bytes));
  for (int64_t r = 0; r < rows; ++r) {
    const std::byte* src = static_cast<const std::byte*>(w) + r * row_bytes;
    if (plain != type) {
      cpu::unpack_row_r16(type, w, cols, r, unpacked.data());
      src = unpacked.data();
    }
    dequantize_row(plain, src, row.data(), cols);
    for (int64_t t = 0; t < n_tokens; ++t) {
      float sum = 0.0f;
      for (int64_t c = 0; c < cols; ++c) sum += row[c] * x[t * cols + c];
      y[t * rows + r] = sum;
    }
  }
}

void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    float ss = 0.0f;
    for (int64_t i = 0; i < dim; ++i) ss += x[t * dim + i] * x[t * dim + i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[t * dim + i] = weight[i] * (scale * x[t * dim + i]);
  }
}

void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                float* out) {
  for (int64_t t = 0; t < n; ++t) {
    const float* r = x + t * dim;
    double mean = 0.0;
    for (int64_t i = 0; i < dim; ++i) mean += r[i];
    mean /= static_cast<double>(dim);
    double var = 0.0;
    for (int64_t i = 0; i < dim; ++i) var += (r[i] - mean) * (r[i] - mean);
    const double inv = 1.0 / std::sqrt(var / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      const double y = (r[i] - mean) * inv * weight[i] + (bias != nullptr ? bias[i] : 0.0f);
      out[t * dim + i] = static_cast<float>(y);
    }
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, RopeStyle style) {
  const int64_t half = rotary_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        const float c = std::cos(angle), s = std::sin(angle);
        const int64_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
        const int64_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

void scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void softcap(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(cap * std::tanh(static_cast<double>(x[i]) / cap));
}

void swiglu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights) {
  const int32_t n_experts = r.n_experts, k = r.k;
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  std::vector<double> score(static_cast<size_t>(n_experts)), choice(score.size());
  for (int64_t t = 0; t < n; ++t) {
    const float* l = logits + t * n_experts;
    double max = l[0], sum = 0.0;
    for (int32_t e = 1; e < n_experts; ++e) max = std::max(max, static_cast<double>(l[e]));
    for (int32_t e = 0; e < n_experts; ++e) sum += std::exp(static_cast<double>(l[e]) - max);
    for (int32_t e = 0; e < n_experts; ++e) {
      const auto i = static_cast<size_t>(e);
      score[i] = r.sigmoid ? 1.0 / (1.0 + std::exp(-static_cast<double>(l[e]))) : std::exp(l[e] - max) / sum;
      choice[i] = r.bias != nullptr ? score[i] + r.bias[e] : l[e];
      order[i] = e;
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return choice[static_cast<size_t>(a)] > choice[static_cast<size_t>(b)]; });
    double chosen = 0.0;
    for (int32_t j = 0; j < k; ++j) chosen += score[static_cast<size_t>(order[static_cast<size_t>(j)])];
    for (int32_t j = 0; j < k; ++j) {
      const int32_t e = order[static_cast<size_t>(j)];
      const double p = score[static_cast<size_t>(e)];
      ids[t * k + j] = e;
      weights[t * k + j] = static_cast<float>((r.normalize ? p / chosen : p) * r.scale);
    }
  }
}

void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) {
  for (int64_t t = 0; t < n; ++t) {
    const double g = 1.0 / (1.0 + std::exp(-static_cast<double>(gate[t])));
    for (int64_t i = 0; i < dim; ++i) x[t * dim + i] = static_cast<float>(g * x[t * dim + i]);
  }
}

void lora(const LoraProduct& p) {
  std::vector<float> shrunk;
  for (int64_t t = 0; t < p.n; ++t) {
    const int32_t s = p.row_slot[t];
    if (s < 0 || s >= p.n_slots || p.factors[s].a == nullptr) continue;
    const LoraFactors& f = p.factors[s];
    shrunk.assign(static_cast<size_t>(f.rank), 0.0f);
    for (int32_t j = 0; j < f.rank; ++j) {
      double acc = 0.0;
      for (int64_t c = 0; c < p.in; ++c) acc += static_cast<double>(f.a[j * p.in + c]) * p.x[t * p.in + c];
      shrunk[static_cast<size_t>(j)] = static_cast<float>(acc);
    }
    for (int64_t o = 0; o < p.out; ++o) {
      double acc = 0.0;
      for (int32_t j = 0; j < f.rank; ++j) acc += static_cast<double>(f.bt[j * p.out + o]) * shrunk[static_cast<size_t>(j)];
      p.y[t * p.out + o] += static_cast<float>(f.scale * acc);
    }
  }
}

void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                 float* out) {
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < dim; ++i) {
      double acc = 0.0;
      for (int32_t j = 0; j < k; ++j) {
        acc += static_cast<double>(weights[t * k + j]) * rows[static_cast<int64_t>(pos[t * k + j]) * dim + i];
      }
      out[t * dim + i] = static_cast<float>(acc);
    }
  }
}

void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double phi = tanh_form ? 0.5 * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (v + 0.044715 * v * v * v)))
                                 : 0.5 * (1.0 + std::erf(v / std::numbers::sqrt2));
    out[i] = static_cast<float>(v * phi * (up != nullptr ? up[i] : 1.0f));
  }
}

namespace {

// Element `i` of a cache of `type`, as float.
float kv_load(const void* cache, KvDType type, int64_t i) {
  switch (type) {
    case KvDType::kF32: return static_cast<const float*>(cache)[i];
    case KvDType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(cache)[i]);
    case KvDType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(cache)[i]);
  }
  HEARTH_CHECK(false) << "unsupported KV cache dtype " << static_cast<int>(type);
  return 0.0f;
}

// Stores x as element `i` of a cache of `type`.
void kv_put(void* cache, KvDType type, int64_t i, float x) {
  switch (type) {
    case KvDType::kF32: static_cast<float*>(cache)[i] = x; return;
    case KvDType::kF16: static_cast<uint16_t*>(cache)[i] = f32_to_fp16(x); return;
    case KvDType::kBF16: static_cast<uint16_t*>(cache)[i] = f32_to_bf16(x); return;
  }
  HEARTH_CHECK(false) << "unsupported KV cache dtype " << static_cast<int>(type);
}

}  // namespace

void kv_store(const KvStoreParams& p) {
  const int64_t kv_dim = static_cast<int64_t>(p.n_kv_heads) * p.head_dim;
  for (int64_t t = 0; t < p.n_tokens; ++t) {
    const int64_t block = p.slots[t] / p.block_size;
    const int32_t offset = p.slots[t] % p.block_size;
    for (int32_t h = 0; h < p.n_kv_heads; ++h) {
      for (int32_t d = 0; d < p.head_dim; ++d) {
        const int64_t x = t * kv_dim + static_cast<int64_t>(h) * p.head_dim + d;
        kv_put(p.k_cache, p.kv_dtype, kv_key_index(block, h, d, offset, p.n_kv_heads, p.head_dim, p.block_size), p.k[x]);
        kv_put(p.v_cache, p.kv_dtype, kv_value_index(block, h, offset, p.n_kv_heads, p.head_dim, p.block_size) + d,
               p.v[x]);
      }
    }
  }
}

void attention(const AttentionParams& p) {
  const int32_t group = p.n_heads / p.n_kv_heads;
  for (int32_t t = 0; t < p.n_tokens; ++t) {
    const int32_t pos = p.positions[t];
    const int32_t first = attention_first_key(pos, p.sliding_window);
    std::vector<float> scores(static_cast<size_t>(pos - first + 1));
    for (int32_t h = 0; h < p.n_heads; ++h) {
      const float* q = p.q + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      const int32_t kvh = h / group;
      float max_score = -INFINITY;
      for (int32_t k = first; k <= pos; ++k) {
        const int64_t block = p.block_table[k / p.block_size];
        float s = 0.0f;
        for (int32_t i = 0; i < p.head_dim; ++i) {
          s += q[i] * kv_load(p.k_cache, p.kv_dtype,
                              kv_key_index(block, kvh, i, k % p.block_size, p.n_kv_heads, p.head_dim, p.block_size));
        }
        s *= p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        scores[k - first] = s;
        max_score = std::max(max_score, s);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* out = p.out + (static_cast<int64_t>(t) * p.n_heads + h) * p.head_dim;
      for (int32_t i = 0; i < p.head_dim; ++i) out[i] = 0.0f;
      for (int32_t k = first; k <= pos; ++k) {
        const int64_t value = kv_value_index(p.block_table[k / p.block_size], kvh, k % p.block_size, p.n_kv_heads,
                                             p.head_dim, p.block_size);
        const float w = scores[k - first] / sum;
        for (int32_t i = 0; i < p.head_dim; ++i) out[i] += w * kv_load(p.v_cache, p.kv_dtype, value + i);
      }
    }
  }
}

}  // namespace hearth::kernels::ref
