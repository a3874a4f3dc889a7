// The arithmetic every CUDA kernel does per element or per tile, as HEARTH_HD functions:
// compiled into the kernels by nvcc and into the CPU unit tests by the host compiler,
// which check them against kernels/reference on random inputs (device_math_test). A
// kernel's own code is then only the loop over its share of the work and the memory
// traffic; what a value is computed to be is defined, and tested, here.
//
// Header-only; pure functions; no dependencies beyond common/ and the standard library;
// C++17 (nvcc's dialect).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/dtype.h"
#include "common/half.h"
#include "common/hd.h"
#include "kernels/attention_params.h"
#include "kernels/moe_params.h"

namespace hearth::kernels::dev {

// ---- Weights --------------------------------------------------------------------------

// The integer of element j (0..31) of a block, and the block's scale: w = scale * int.
HEARTH_HD int32_t q8_0_int(const BlockQ8_0& b, int j) { return b.qs[j]; }
HEARTH_HD int32_t q4_0_int(const BlockQ4_0& b, int j) {
  return j < 16 ? (b.qs[j] & 0x0f) - 8 : (b.qs[j - 16] >> 4) - 8;
}
HEARTH_HD float q8_0_value(const BlockQ8_0& b, int j) { return fp16_to_f32(b.d) * static_cast<float>(q8_0_int(b, j)); }
HEARTH_HD float q4_0_value(const BlockQ4_0& b, int j) { return fp16_to_f32(b.d) * static_cast<float>(q4_0_int(b, j)); }

// Element c of a row of a float type (F32, F16, BF16) as float; 0 for any other type.
HEARTH_HD float float_row_value(DType type, const void* row, int64_t c) {
  switch (type) {
    case DType::kF32: return static_cast<const float*>(row)[c];
    case DType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(row)[c]);
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(row)[c]);
    default: return 0.0f;
  }
}

// A matrix [rows = out_features, cols = in_features] quantized the GPTQ way: `bits` (4 or
// 8) per weight, packed 32 / bits to an int32, low bits first; one fp16 scale and one
// integer zero per (group, row); the group of input column c is g_idx[c] (act-order
// checkpoints) or c / group_size. w[r, c] = scale[g, r] * (q[c, r] - (zero[g, r] +
// zero_offset)); zero_offset is 1 for checkpoints that store zero - 1 (AutoGPTQ's v1
// format, the common one) and 0 for those that store the zero itself.
struct GroupQuantView {
  const int32_t* qweight = nullptr;  // [cols / pack, rows]: word (c / pack, r) holds columns c.. of row r
  const int32_t* qzeros = nullptr;   // [n_groups, rows / pack]: word (g, r / pack) holds rows r..
  const uint16_t* scales = nullptr;  // [n_groups, rows] fp16
  const int32_t* g_idx = nullptr;    // [cols], or null: group = c / group_size
  int64_t rows = 0;
  int64_t cols = 0;
  int32_t bits = 4;
  int32_t group_size = 128;
  int32_t zero_offset = 1;
};

HEARTH_HD int32_t group_quant_pack(int32_t bits) { return 32 / bits; }

// Value `index` (0..pack-1) of a packed word.
HEARTH_HD int32_t group_quant_unpack(int32_t word, int32_t index, int32_t bits) {
  const uint32_t mask = (1u << bits) - 1u;
  return static_cast<int32_t>((static_cast<uint32_t>(word) >> (index * bits)) & mask);
}

HEARTH_HD int32_t group_quant_group(const GroupQuantView& m, int64_t c) {
  return m.g_idx != nullptr ? m.g_idx[c] : static_cast<int32_t>(c / m.group_size);
}

// w[r, c] as float, computed as the kernels compute it: scale * (q - zero) in float.
HEARTH_HD float group_quant_value(const GroupQuantView& m, int64_t r, int64_t c) {
  const int32_t pack = group_quant_pack(m.bits);
  const int32_t q = group_quant_unpack(m.qweight[(c / pack) * m.rows + r], static_cast<int32_t>(c % pack), m.bits);
  const int32_t g = group_quant_group(m, c);
  const int64_t zero_words = m.rows / pack;
  const int32_t z = group_quant_unpack(m.qzeros[g * zero_words + r / pack], static_cast<int32_t>(r % pack), m.bits);
  const float scale = fp16_to_f32(m.scales[static_cast<int64_t>(g) * m.rows + r]);
  return scale * static_cast<float>(q - (z + m.zero_offset));
}

// ---- Activations of the Q8_0/Q4_0 products --------------------------------------------
// A block of 32 activations becomes d = max|x| / 127 and q = round-to-nearest-even(x / d)
// (0 for an all-zero block), and a block's contribution to a dot product is
// d_w * d_x * sum(q_w * q_x): the function reference::matmul and the CPU kernels compute.

HEARTH_HD float act_block_scale(float amax) { return amax / 127.0f; }

HEARTH_HD int32_t act_quantize(float x, float scale) {
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  return static_cast<int32_t>(rintf(x * inv));
}

// ---- Online softmax -------------------------------------------------------------------
// Attention's softmax computed a key (or a tile of keys) at a time: the running maximum
// of the scores seen and the sum of exp(score - max). Partial states of disjoint key
// ranges merge in any order (split-K decode); the output accumulated with one state is
// rescaled by the factor a push or merge returns.
struct SoftmaxState {
  float max = -INFINITY;
  float sum = 0.0f;
};

// Folds score `s` in. `rescale` multiplies what was accumulated so far, `weight` is the
// unnormalised weight of s's value: acc = acc * rescale + weight * v.
HEARTH_HD void softmax_push(SoftmaxState& st, float s, float& rescale, float& weight) {
  const float m = s > st.max ? s : st.max;
  rescale = st.max == -INFINITY ? 0.0f : expf(st.max - m);
  weight = expf(s - m);
  st.sum = st.sum * rescale + weight;
  st.max = m;
}

// Merges b into a: acc = acc_a * scale_a + acc_b * scale_b.
HEARTH_HD void softmax_merge(SoftmaxState& a, const SoftmaxState& b, float& scale_a, float& scale_b) {
  if (b.max == -INFINITY) {
    scale_a = 1.0f;
    scale_b = 0.0f;
    return;
  }
  if (a.max == -INFINITY) {
    a = b;
    scale_a = 0.0f;
    scale_b = 1.0f;
    return;
  }
  const float m = a.max > b.max ? a.max : b.max;
  scale_a = expf(a.max - m);
  scale_b = expf(b.max - m);
  a.sum = a.sum * scale_a + b.sum * scale_b;
  a.max = m;
}

// ---- RoPE -----------------------------------------------------------------------------

// The two dimensions pair i (0..rotary_dim/2-1) rotates: (2i, 2i+1) interleaved, else
// (i, i + rotary_dim/2). Dimensions rotary_dim.. of a head (partial rotary: GPT-J,
// GPT-NeoX) are left as they are.
HEARTH_HD void rope_pair(int32_t i, int32_t rotary_dim, bool interleaved, int32_t& a, int32_t& b) {
  a = interleaved ? 2 * i : i;
  b = interleaved ? 2 * i + 1 : i + rotary_dim / 2;
}

// (x0, x1) rotated by position * inv_freq.
HEARTH_HD void rope_rotate(float& x0, float& x1, int32_t position, float inv_freq) {
  const float angle = static_cast<float>(position) * inv_freq;
  const float c = cosf(angle), s = sinf(angle);
  const float a = x0, b = x1;
  x0 = a * c - b * s;
  x1 = a * s + b * c;
}

// ---- Paged KV cache -------------------------------------------------------------------

// The block and offset of cache slot `slot`.
HEARTH_HD int64_t kv_slot_block(int32_t slot, int32_t block_size) { return slot / block_size; }
HEARTH_HD int32_t kv_slot_offset(int32_t slot, int32_t block_size) { return slot % block_size; }

// The cache block of position `pos` of a sequence whose page table is `pages`.
HEARTH_HD int64_t kv_position_block(const int32_t* pages, int32_t pos, int32_t block_size) {
  return pages[pos / block_size];
}

// The sequence a step's token t belongs to: the last s with query_start[s] <= t
// (query_start: [n_seqs + 1], ascending, query_start[0] = 0, t < query_start[n_seqs]).
HEARTH_HD int32_t step_sequence_of(const int32_t* query_start, int32_t n_seqs, int32_t t) {
  int32_t lo = 0, hi = n_seqs - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Element i of a cache of `type`, widened to float; and x stored as element i, rounded
// to nearest even (what the reference's kv_store writes).
HEARTH_HD float kv_element_load(const void* cache, KvDType type, int64_t i) {
  switch (type) {
    case KvDType::kF32: return static_cast<const float*>(cache)[i];
    case KvDType::kF16: return fp16_to_f32(static_cast<const uint16_t*>(cache)[i]);
    case KvDType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(cache)[i]);
  }
  return NAN;  // a dtype outside the enum: kernels refuse it before launching
}

HEARTH_HD void kv_element_store(void* cache, KvDType type, int64_t i, float x) {
  switch (type) {
    case KvDType::kF32: static_cast<float*>(cache)[i] = x; return;
    case KvDType::kF16: static_cast<uint16_t*>(cache)[i] = f32_to_fp16(x); return;
    case KvDType::kBF16: static_cast<uint16_t*>(cache)[i] = f32_to_bf16(x); return;
  }
}

// ---- Elementwise ----------------------------------------------------------------------

HEARTH_HD float silu_mul(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// GELU, exact (erf: GPT-NeoX "gelu") and in its tanh form ("gelu_new", "gelu_pytorch_tanh":
// GPT-J, Gemma): x * Phi(x), Phi the normal CDF or its tanh approximation.
HEARTH_HD float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }
HEARTH_HD float gelu_tanh(float x) {
  return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
}
HEARTH_HD float gelu(float x, bool tanh_form) { return tanh_form ? gelu_tanh(x) : gelu_erf(x); }

// Soft-capping (Gemma 2): cap * tanh(x / cap), which bounds x to (-cap, cap) and leaves
// small values nearly as they are; a cap of 0 or less is none.
HEARTH_HD float softcap(float x, float cap) { return cap > 0.0f ? cap * tanhf(x / cap) : x; }

// 1 / rms of a row whose sum of squares is `sum_sq`.
HEARTH_HD float rms_inv(float sum_sq, int64_t dim, float eps) {
  return 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
}

// ---- Mixture of experts --------------------------------------------------------------

// One expert's score (its weight before renormalising) from the router's logits: the
// softmax probability (max and sum: the row's largest logit and sum of e^(l - max)), or
// the sigmoid of its own logit.
HEARTH_HD float moe_score(const float* logits, int32_t e, bool use_sigmoid, float max, float sum) {
  return use_sigmoid ? 1.0f / (1.0f + expf(-logits[e])) : expf(logits[e] - max) / sum;
}

// The k experts a token is routed to by its router logits ([n_experts]), as `r` says:
// ids in descending order of choice (the logit, or with a bias the score plus its bias;
// the lower id first among equals), weights their scores, renormalised over the k when
// r.normalize, then times r.scale.
HEARTH_HD void moe_top_k(const float* logits, const MoeRouting& r, int32_t* ids, float* weights) {
  const int32_t n_experts = r.n_experts, k = r.k;
  float max = logits[0];
  for (int32_t e = 1; e < n_experts; ++e) max = logits[e] > max ? logits[e] : max;
  float sum = 0.0f;
  if (!r.sigmoid) {
    for (int32_t e = 0; e < n_experts; ++e) sum += expf(logits[e] - max);
  }
  float chosen = 0.0f;
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_choice = 0.0f;
    for (int32_t e = 0; e < n_experts; ++e) {
      bool taken = false;
      for (int32_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (taken) continue;
      const float choice = r.bias != nullptr ? moe_score(logits, e, r.sigmoid, max, sum) + r.bias[e] : logits[e];
      if (best < 0 || choice > best_choice) {
        best = e;
        best_choice = choice;
      }
    }
    ids[j] = best;
    weights[j] = moe_score(logits, best, r.sigmoid, max, sum);
    chosen += weights[j];
  }
  for (int32_t j = 0; j < k; ++j) {
    if (r.normalize) weights[j] /= chosen;
    weights[j] *= r.scale;
  }
}

// Element i of token t's combined expert output: sum over its k experts of the weight
// times that expert's row (rows[pos[j]]), in expert-rank order.
HEARTH_HD float moe_combine_value(const float* rows, const int32_t* pos, const float* weights, int32_t k, int64_t dim,
                                  int64_t i) {
  float acc = 0.0f;
  for (int32_t j = 0; j < k; ++j) acc += weights[j] * rows[static_cast<int64_t>(pos[j]) * dim + i];
  return acc;
}

// One output of a LoRA expansion: scale * sum_j shrunk[j] * bt[j * stride] (B transposed,
// this output's column), summed over the adapter's rank in the CPU's order (nvcc may fuse
// the multiply-adds, so a GPU agrees to rounding, not bit for bit).
HEARTH_HD float lora_expand_value(const float* bt, int64_t stride, const float* shrunk, int32_t rank, float scale) {
  float acc = 0.0f;
  for (int32_t j = 0; j < rank; ++j) acc += shrunk[j] * bt[j * stride];
  return scale * acc;
}

// The logistic function, 1 / (1 + e^-x): the gate of a shared expert (Qwen2-MoE).
HEARTH_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// LayerNorm's 1 / sqrt(variance + eps) from the sum of squared deviations from the mean.
HEARTH_HD float layer_norm_inv(float sum_sq_dev, int64_t dim, float eps) {
  return 1.0f / sqrtf(sum_sq_dev / static_cast<float>(dim) + eps);
}
// One element of a LayerNorm row: (x - mean) * inv * weight + bias (bias may be null).
HEARTH_HD float layer_norm_value(float x, float mean, float inv, const float* weight, const float* bias, int64_t i) {
  const float y = (x - mean) * inv * weight[i];
  return bias != nullptr ? y + bias[i] : y;
}

// ---- Packed int8 products (the quantized matrix products' weight-streaming path) ------

// a . b over four signed bytes packed in each word, plus c: CUDA's __dp4a on the device,
// the same sum on the host (exact in int32 for int8 inputs).
HEARTH_HD int32_t dot4_i8(uint32_t a, uint32_t b, int32_t c) {
#if defined(__CUDA_ARCH__)
  return __dp4a(static_cast<int>(a), static_cast<int>(b), c);
#else
  for (int k = 0; k < 4; ++k) {
    c += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * k))) * static_cast<int32_t>(static_cast<int8_t>(b >> (8 * k)));
  }
  return c;
#endif
}

// Four bytes of a block's qs at byte offset `at` (even: the blocks are 2-byte aligned),
// little-endian, read as two 16-bit halves.
HEARTH_HD uint32_t qs_word(const uint8_t* qs, int at) {
#if defined(__CUDA_ARCH__)
  const auto* h = reinterpret_cast<const uint16_t*>(qs + at);
  return static_cast<uint32_t>(h[0]) | static_cast<uint32_t>(h[1]) << 16;
#else
  if (reinterpret_cast<uintptr_t>(qs + at) % 2 != 0) __builtin_trap();  // as the device's 16-bit loads would fault
  uint32_t w;
  std::memcpy(&w, qs + at, sizeof w);
  return w;
#endif
}

// Values 4i..4i+3 (i in 0..7) of a block as packed signed bytes: q8_0_int / q4_0_int of
// each, four at a time.
HEARTH_HD uint32_t q8_0_word(const BlockQ8_0& b, int i) {
  return qs_word(reinterpret_cast<const uint8_t*>(b.qs), 4 * i);
}
HEARTH_HD uint32_t q4_0_word(const BlockQ4_0& b, int i) {
  const uint32_t u = qs_word(b.qs, 4 * (i & 3));
  const uint32_t nibbles = (i < 4 ? u : u >> 4) & 0x0f0f0f0fu;
  // Each byte minus 8 without a borrow between bytes: +128, -8, then back by 128.
  return ((nibbles | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
}

// 16 bytes read at once (one 128-bit load on the device); `p` 16-byte aligned.
struct alignas(16) Bytes16 {
  uint32_t w[4];
};
HEARTH_HD Bytes16 load16(const void* p) {
#if defined(__CUDA_ARCH__)
  return *static_cast<const Bytes16*>(p);
#else
  // A misaligned 128-bit load faults on a GPU: here too (the emulated device's kernels
  // and the host tests run this path).
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) __builtin_trap();
  Bytes16 b;
  std::memcpy(&b, p, sizeof b);
  return b;
#endif
}

// The values of 16 bytes of a float row (F32: 4, F16 and BF16: 8), as float_row_value
// reads each.
HEARTH_HD void float_values16(DType type, const Bytes16& raw, float* out) {
  for (int i = 0; i < 4; ++i) {
    if (type == DType::kF32) {
      out[i] = hd_bits_float(raw.w[i]);
    } else {
      const auto lo = static_cast<uint16_t>(raw.w[i] & 0xffffu), hi = static_cast<uint16_t>(raw.w[i] >> 16);
      out[2 * i] = type == DType::kF16 ? fp16_to_f32(lo) : bf16_to_f32(lo);
      out[2 * i + 1] = type == DType::kF16 ? fp16_to_f32(hi) : bf16_to_f32(hi);
    }
  }
}

}  // namespace hearth::kernels::dev
