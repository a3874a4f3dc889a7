// Scalar reference implementations of every op: the oracle the CPU and CUDA kernels are
// tested against. Written for clarity (sequential float accumulation, no tricks), not
// speed. Pure functions over caller-owned memory; thread-safe.
#pragma once

#include <cstdint>

#include "common/dtype.h"
#include "common/model_config.h"
#include "kernels/attention_params.h"
#include "kernels/device_math.h"
#include "kernels/lora_params.h"

namespace hearth::kernels::ref {

// dst[n] = the n values of a row of `type` (n a multiple of the type's block size).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// out[r, c] = w[r, c] of a group-quantized (GPTQ-layout) matrix as float, read from its
// packed words bit by bit ([rows, cols]; the format: dev::GroupQuantView).
void dequantize_group_quant(const dev::GroupQuantView& m, float* out);

// y[t, r] = sum_c W[r, c] * x[t, c] for r < rows, t < n_tokens.
// w: [rows, cols] of `type`; x: [n_tokens, cols]; y: [n_tokens, rows].
// For Q8_0/Q4_0 weights x is first quantized per 32 values (d = max|x| / 127, q =
// round-to-nearest-even(x / d)) and each block contributes d_w * d_x * sum(q_w * q_x),
// the function the CPU kernels compute (kernels/cpu/matmul.h).
void matmul(DType type, const void* w, int64_t rows, int64_t cols, const float* x, int64_t n_tokens, float* y);

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight, for each of n rows of dim values.
void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// out[t] = (x[t] - mean) / sqrt(var + eps) * weight + bias (bias may be null), over n
// rows of dim values (out may be x): LayerNorm.
void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                float* out);

// Rotates the first rotary_dim dimensions of each head of x ([n_tokens, n_heads,
// head_dim]) by angle position * inv_freq[i] for pair i ([rotary_dim / 2]); the pairs
// are (2i, 2i+1) or (i, i + rotary_dim/2) as `style` says. The rest of a head is kept.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, RopeStyle style);

// x *= s over n values.
void scale(float* x, int64_t n, float s);

// x = cap * tanh(x / cap) over n values (in double); cap > 0.
void softcap(float* x, int64_t n, float cap);

// out = silu(gate) * up, elementwise over n values.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// out = gelu(x) (* up when up is given), elementwise over n values; the exact (erf) or
// the tanh form of GELU (device_math.h's gelu_erf / gelu_tanh in double).
void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out);

// Mixture-of-experts routing: for each of n tokens, its k experts by its router logits
// ([n, r.n_experts]) as ids ([n, k], in descending order of choice: the logit, or the
// score plus r.bias; the lower id first among equals) and weights ([n, k]: the scores,
// softmax probabilities over all experts or sigmoids, in double, renormalised over the
// k when r.normalize, times r.scale).
void moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights);
// out[t] = sum_j weights[t, j] * rows[pos[t, j]] for t < n, j < k. rows: [*, dim].
void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                 float* out);
// x[t, i] *= 1 / (1 + e^-gate[t]) for t < n, i < dim (in double): rows scaled by a
// sigmoid gate of their own.
void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim);
// LoRA: for each row t whose slot s = p.row_slot[t] >= 0 has factors of this matrix,
// p.y[t] += scale * B (A x[t]), the shrunk row (A x[t], in double) rounded to float and
// the expanded values summed in double.
void lora(const LoraProduct& p);

// Stores token t's K and V rows at cache slot p.slots[t], each element converted to
// p.kv_dtype with common/half.h (round to nearest even; f32 copied).
void kv_store(const KvStoreParams& p);

// Causal attention of each query over the cached keys 0..position (softmax in two passes),
// reading cache elements of p.kv_dtype widened to float (f32 read as is).
void attention(const AttentionParams& p);

}  // namespace hearth::kernels::ref
