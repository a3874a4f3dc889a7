// CPU elementwise and row ops of the forward pass: RMSNorm, LayerNorm, RoPE, SwiGLU,
// GELU, adds.
// Pure functions over caller-owned memory; thread-safe for disjoint outputs.
#pragma once

#include <cstdint>

#include "common/model_config.h"
#include "kernels/lora_params.h"
#include "kernels/moe_params.h"

namespace hearth::kernels::cpu {

// out[t] = x[t] / sqrt(mean(x[t]^2) + eps) * weight for n rows of dim values (out may be x).
void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// x[t] += delta[t], then out[t] = rms_norm(x[t]) * weight, in one pass over x: the
// residual add fused with the next norm. Bit-identical to add() then rms_norm(). out may
// be delta (each row of delta is read before that row of out is written).
void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps, float* out);

// LayerNorm of n rows of dim values with weight and bias (bias may be null; out may be
// x); see ref::layer_norm. Mean and variance in two passes over the row, in float.
void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                float* out);

// In-place rotary embedding of the first rotary_dim dimensions of each head of x
// ([n_tokens, n_heads, head_dim]); see ref::rope.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
          const int32_t* positions, const float* inv_freq, RopeStyle style);

// out = silu(gate) * up over n values (out may alias gate); e^x by fast_exp.h.
void swiglu(const float* gate, const float* up, int64_t n, float* out);

// out = gelu(x) (* up when given) over n values (out may alias x); device_math.h's form.
void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out);

// Mixture-of-experts routing and combination of n tokens; see ref::moe_route and
// ref::moe_combine (dev::moe_top_k and dev::moe_combine_value in float).
void moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights);
void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                 float* out);
// ref::lora in float, in eight-lane dot products of a fixed order, so that every
// instruction-set path, and every split of the work, gives the same bits. For the rows
// `rows` (n of them) of one slot, whose factors are f: lora_shrink writes their scratch
// values j0..j1-1 (A[j] . x[row]), reading each A row once for all of them; lora_expand
// adds outputs o0..o1-1 (scale * sum_j scratch[row, j] * Bt[j, o]), after the whole shrink.
void lora_shrink(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int32_t j0, int32_t j1);
void lora_expand(const LoraProduct& p, const LoraFactors& f, const int32_t* rows, int64_t n, int64_t o0, int64_t o1);
// Rows t0..t1-1 of ref::lora, each row on its own (shrink then expand).
void lora_rows(const LoraProduct& p, int64_t t0, int64_t t1);

// x[t, i] *= dev::sigmoid(gate[t]); see ref::sigmoid_gate_rows.
void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim);

// The sum of e^(x[i] - max) over n values, each x[i] <= max (the log-normaliser of a row
// of logits, without its log): vectorized, within ~1e-6 relative of the exact sum.
double sum_exp_below(const float* x, int64_t n, float max);

// x *= s over n values.
void scale(float* x, int64_t n, float s);

// x = cap * tanh(x / cap) over n values (dev::softcap); cap > 0.
void softcap(float* x, int64_t n, float cap);

// y += x over n values.
void add(float* y, const float* x, int64_t n);

// x[t] += bias for n rows of dim values.
void add_bias(float* x, const float* bias, int64_t n, int64_t dim);

}  // namespace hearth::kernels::cpu
