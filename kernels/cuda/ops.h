// The CUDA kernels of the Llama forward pass: raw device pointers and a params struct
// in, an op enqueued on `stream` out, a cudaError_t back (cudaErrorNotSupported for a
// dtype or shape a kernel does not handle, checked before anything is launched). Every
// per-element computation is a kernels/device_math.h function, tested on the host; the
// launch geometry is kernels/cuda/launch.h's. Decode-shaped: one warp per output row
// and group of 8 tokens for matrix products (weights streamed once per group), one
// block per (token, head, key range) for attention; no tensor cores of their own.
// No engine, Boost or spdlog headers (kernels/README.md). Thread-safe; the kernels keep
// no state.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/sampling_params.h"
#include "kernels/attention_params.h"
#include "kernels/device_math.h"
#include "kernels/lora_params.h"

namespace hearth::kernels::cuda {

// y[t, r] = sum_c w[r, c] * x[t, c]. w: [rows, cols] of `type` (F32, F16, BF16, Q8_0,
// Q4_0; the CPU's row-interleaved layouts are refused); x: [n_tokens, cols];
// y: [n_tokens, rows]. Q8_0/Q4_0 quantize x per 32 values into `scratch` first
// (matmul_scratch_bytes), as reference::matmul defines the product.
// Which kernel a Q8_0/Q4_0 product runs: chosen by the token count (kAuto: tensor cores
// from kQuantMmaMinTokens on), or one forced, for the benchmark and the tests. Float types
// always stream.
enum class MatmulPath { kAuto, kStreaming, kTensorCores };

struct MatmulParams {
  DType type = DType::kF32;
  const void* w = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  const float* x = nullptr;
  int64_t n_tokens = 0;
  float* y = nullptr;
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  MatmulPath path = MatmulPath::kAuto;
  // The device's SM count, for splitting a streaming product over its columns where its
  // rows are too few to fill the SMs (matvec_splits); 0: never split.
  int32_t sm_count = 0;
};

// y[t, r] = sum_c w[r, c] * x[t, c] for a group-quantized matrix in the GPTQ layout
// (dev::GroupQuantView: int4 or int8 values, fp16 scales, zeros, optional act-order
// g_idx), dequantized in registers as dev::group_quant_value defines. cols must be a
// multiple of the pack (32 / bits) and rows of it too (the zeros are packed by row).
// From kGroupQuantMmaMinTokens tokens on (or forced by `path`) it runs on tensor cores:
// the weights, dequantized so, and the activations rounded to f16 tile by tile, products
// summed in f32 (so each term is within 2^-10 of the float one, relatively, for values in
// f16's normal range; below 6.1e-5 the rounding's error is absolute and smaller than
// that; a weight or activation past f16's 65504 would not be, which GPTQ checkpoints'
// scales and LLM activations stay well inside).
cudaError_t matmul_group_quant(const dev::GroupQuantView& w, const float* x, int64_t n_tokens, float* y,
                               cudaStream_t stream, MatmulPath path = MatmulPath::kAuto);

// Scratch a matmul of `type` over [n_tokens, cols] activations needs (0 for float types).
size_t matmul_scratch_bytes(DType type, int64_t n_tokens, int64_t cols);
// Scratch the product p describes needs (its scratch fields aside): the quantized
// activations, and where it is split, its column ranges' sums.
size_t matmul_scratch_bytes(const MatmulParams& p);
cudaError_t matmul(const MatmulParams& p, cudaStream_t stream);
// The Q8_0/Q4_0 product of silu(gate) * up ([n_tokens, cols], p.x == gate): gate is
// overwritten with the activation, as swiglu writes it (computed as it is quantized: a
// launch and a pass over the activations fewer), and y = it w^T as matmul computes it.
// Other types are refused (cudaErrorNotSupported, gate untouched): the backend runs
// swiglu, then its own product (cuBLASLt for 16-bit weights over 8 tokens or more).
cudaError_t swiglu_matmul(const MatmulParams& p, float* gate, const float* up, cudaStream_t stream);

// out[t] = table[ids[t]] as float. table: [vocab, dim] of `type` (not row-interleaved).
cudaError_t embedding(DType type, const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out,
                      cudaStream_t stream);

// out = x / rms(x) * weight per row ([n, dim]; out may be x).
cudaError_t rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out,
                     cudaStream_t stream);
// x += delta, then out = rms_norm(x) * weight ([n, dim]; out may be delta).
cudaError_t add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                         float* out, cudaStream_t stream);

// out = (x - mean) / sqrt(var + eps) * weight + bias per row ([n, dim]; bias may be
// null; out may be x).
cudaError_t layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                       float* out, cudaStream_t stream);

// x: [n, n_heads, head_dim], the first rotary_dim dimensions of each head rotated in place
// by positions[t] * inv_freq[i] ([rotary_dim / 2]).
cudaError_t rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                 const int32_t* positions, const float* inv_freq, bool interleaved, cudaStream_t stream);

// out = silu(gate) * up; y += x; x[t] += bias ([n, dim]); out[i] = x[rows[i]] ([n, dim]).
cudaError_t swiglu(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
// out = gelu(x) (* up when given) over n values, dev::gelu's form.
cudaError_t gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out, cudaStream_t stream);
cudaError_t add(float* y, const float* x, int64_t n, cudaStream_t stream);
// x *= s over n values.
cudaError_t scale(float* x, int64_t n, float s, cudaStream_t stream);
// x = dev::softcap(x, cap) over n values.
cudaError_t softcap(float* x, int64_t n, float cap, cudaStream_t stream);
cudaError_t add_bias(float* x, const float* bias, int64_t n, int64_t dim, cudaStream_t stream);
cudaError_t gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out, cudaStream_t stream);
// out[t, j] = x[t, perm[j]]: x, out [n, cols].
cudaError_t permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out,
                            cudaStream_t stream);

// Mixture of experts: each token's top-k experts and weights (dev::moe_top_k, a thread
// per token), and out[t] = sum_j weights[t, j] * rows[pos[t, j]] (dev::moe_combine_value).
cudaError_t moe_route(const float* logits, int64_t n, const MoeRouting& r, int32_t* ids, float* weights,
                      cudaStream_t stream);
cudaError_t moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                        float* out, cudaStream_t stream);
// LoRA (ref::lora): each adapted row's A x into p.scratch (a warp per (rank, row):
// matvec_launch), then y += scale * B (A x) (a block per row, a thread per output reading
// its column of Bt, consecutive threads consecutive outputs:
// rows_launch, dev::lora_expand_value). p.factors and p.row_slot are device memory.
cudaError_t lora(const LoraProduct& p, cudaStream_t stream);
// x[t, i] *= dev::sigmoid(gate[t]): x [n, dim], a block per row.
cudaError_t sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim, cudaStream_t stream);

// Token t's K and V rows to cache slot p.slots[t], converted to p.kv_dtype (the
// reference's kv_store, bit for bit).
cudaError_t kv_store(const KvStoreParams& p, cudaStream_t stream);
// rope of q ([p.n_tokens, n_heads, p.head_dim]) and of k (p.k's rows) in place, and
// kv_store(p) of the rotated k and p.v, in one launch: a thread per rotated pair of q, per
// rotated pair or further dimension of k (stored as it is rotated), per element of v.
// The same arithmetic as rope then kv_store, bit for bit.
cudaError_t rope_kv_store(float* q, float* k, int64_t n_heads, int64_t rotary_dim, const int32_t* positions,
                          const float* inv_freq, bool interleaved, const KvStoreParams& p, cudaStream_t stream);

// Causal attention of every sequence of a step over the paged cache: the queries of
// sequence s are rows [query_start[s], query_start[s + 1]) of q, its blocks
// pages[page_start[s]..]; all arrays in device memory.
cudaError_t attention(const AttentionStep& p, cudaStream_t stream);
// The same with each (token, head)'s keys cut into `splits` ranges (flash-decoding; the
// count from attention_splits()), run in parallel and merged: `scratch` holds
// attention_scratch_bytes() of device memory. The result differs from one range's by
// float rounding only.
struct AttentionSplit {
  int32_t splits = 1;
  float* scratch = nullptr;
  size_t scratch_bytes = 0;
};
cudaError_t attention(const AttentionStep& p, const AttentionSplit& split, cudaStream_t stream);

// Float activations to fp16 or bf16 (`type`), rounded to nearest even, for the cuBLASLt
// products.
cudaError_t convert_activations(const float* x, int64_t n, DType type, void* out, cudaStream_t stream);

// Sampling n_rows rows of logits as the engine's driver and sampler do on the host
// (kernels/cuda/sampling.cu). Per row: its parameters, the index of its draw in the
// seed's stream, how many top logprobs to report, and where its prompt and output
// tokens are in `tokens` (for the penalties).
struct SampleRowParams {
  SamplingParams sampling;
  uint64_t draw = 0;
  int32_t top_logprobs = 0;  // 0..kMaxTopLogprobs
  int32_t prompt_begin = 0, prompt_count = 0;
  int32_t output_begin = 0, output_count = 0;
  int32_t reserved = 0;
};

// The sampled token, its logprob and the normaliser under the raw logits, and the raw
// top logprobs (logit descending, id ascending).
struct SampleRowResult {
  int32_t id = -1;
  float logprob = 0.0f;
  float log_z = 0.0f;
  int32_t n_top = 0;
  int32_t top_ids[kMaxTopLogprobs] = {};
  float top_logprobs[kMaxTopLogprobs] = {};
  int32_t top_id = -1;     // the raw row's top token (the lowest id among equals)
  float top_logit = 0.0f;  // and its logit
};

struct SampleParams {
  const float* logits = nullptr;          // [n_rows, vocab], device
  int64_t n_rows = 0;
  int64_t vocab = 0;
  const SampleRowParams* rows = nullptr;  // [n_rows], device
  const int32_t* tokens = nullptr;        // device
  SampleRowResult* out = nullptr;         // [n_rows], device
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
};

size_t sample_scratch_bytes(int64_t n_rows, int64_t vocab);
cudaError_t sample(const SampleParams& p, cudaStream_t stream);

}  // namespace hearth::kernels::cuda
