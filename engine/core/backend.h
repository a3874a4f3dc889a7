// Backend: the ops of the forward pass, implemented once per device kind.
//
// The model (model.h) is written once against this interface; the CPU backend is the
// reference every other backend is tested against. A backend owns the memory it hands
// out (activations, KV cache, a step's uploaded input) and the weights it binds
// (bind_weights: pointers into the segment on the CPU, device copies elsewhere); every
// pointer passed to an op points into such memory. Per-step metadata (token ids,
// positions, KV slots, page tables, logit rows) reaches ops only through the StepInput
// that upload() returns. Ops are called from one thread (the engine's step loop); a
// backend may use its own threads inside an op. Ops never fail on valid shapes: shapes
// are validated when the model is created, inputs when a step is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "common/dtype.h"
#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/token.h"
#include "engine/core/model_input.h"
#include "engine/core/sampler.h"
#include "kernels/attention_params.h"
#include "kernels/lora_params.h"
#include "kernels/moe_params.h"

namespace hearth {

enum class BackendOp : uint8_t {
  kEmbedding,  // rows of a weight table, dequantized
  kMatmul,     // activations x weight matrix^T
  kRmsNorm,
  kLayerNorm,
  kRope,
  kKvStore,
  kAttention,
  kSwiglu,
  kGelu,
  kAdd,
  kScale,
  kAddRmsNorm,
  kGatherRows,
  kPermuteColumns,
  kMoeRoute,
  kMoeCombine,
  kLora,
};

// Memory owned by a backend (host or device), freed when the handle dies. Move-only.
class BackendBuffer {
 public:
  using Deleter = void (*)(void* data, size_t bytes) noexcept;
  BackendBuffer() = default;
  BackendBuffer(void* data, size_t bytes, Deleter deleter) : data_(data), bytes_(bytes), deleter_(deleter) {}
  BackendBuffer(BackendBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), deleter_(other.deleter_) {}
  BackendBuffer& operator=(BackendBuffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      deleter_ = other.deleter_;
    }
    return *this;
  }
  BackendBuffer(const BackendBuffer&) = delete;
  BackendBuffer& operator=(const BackendBuffer&) = delete;
  ~BackendBuffer() { reset(); }

  void* data() const { return data_; }
  float* f32() const { return static_cast<float*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void reset() noexcept {
    if (data_ != nullptr && deleter_ != nullptr) deleter_(data_, bytes_);
    data_ = nullptr;
  }

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Deleter deleter_ = nullptr;
};

// One step's ModelInput as the backend reads it (in its own memory), valid until the
// next upload. `host` is the same input in host memory, for what a backend decides on
// the host (sizes, splitting work).
struct StepInput {
  const TokenId* tokens = nullptr;       // [n_tokens]
  const int32_t* positions = nullptr;    // [n_tokens]
  const int32_t* slots = nullptr;        // [n_tokens]
  const int32_t* query_start = nullptr;  // [n_seqs + 1]
  const int32_t* page_start = nullptr;   // [n_seqs + 1]
  const int32_t* pages = nullptr;
  const int32_t* logit_rows = nullptr;   // [n_logit_rows]
  const int32_t* hidden_rows = nullptr;  // [n_hidden_rows]
  const int32_t* adapters = nullptr;     // [n_tokens] each row's adapter slot; null: none has one
  int32_t n_tokens = 0;
  int32_t n_seqs = 0;
  int32_t n_logit_rows = 0;
  int32_t n_hidden_rows = 0;
  int32_t block_size = 0;
  int32_t max_keys = 0;  // the most keys a row attends (ModelInput::max_keys)
};

// Weights as a backend reads them, owned by the backend: views whose `data` is an
// address the backend's kernels read (host or device), under the same names and shapes
// as the tensors they were bound from.
class BoundWeights {
 public:
  virtual ~BoundWeights() = default;
  virtual std::span<const TensorView> tensors() const = 0;
};

// One matrix of a matmuls() call and where its product goes.
struct MatmulTarget {
  const TensorView* w = nullptr;
  float* y = nullptr;
};

// The queue a backend's ops run on, in order: a cudaStream_t on CUDA, null on the CPU
// (whose ops finish before they return). Collectives are ordered on it too.
struct DeviceQueue {
  void* handle = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceQueue queue() const { return {}; }

  // "cpu", "cuda:0".
  virtual std::string_view name() const = 0;
  // Host threads its ops compute on.
  virtual int threads() const { return 1; }
  // Whether `op` is implemented (for weights of `type`, where the op reads weights).
  virtual bool supports(BackendOp op, DType type = DType::kF32) const = 0;

  // Binds tensors laid out as `layout` (kLayoutPlain, kLayoutCpuR16: common/tensor.h)
  // for this backend's kernels. kUnsupported for a layout it cannot read, naming the
  // hearth-loader flag that writes one it can.
  virtual Result<std::unique_ptr<BoundWeights>> bind_weights(std::span<const TensorView> tensors,
                                                             std::string_view layout) = 0;
  // Makes a step's input readable by the ops (a copy to device memory, or none).
  virtual StepInput upload(const ModelInput& input) = 0;

  // Waits until every op queued so far has run (a device's stream); a host backend has
  // run each op when its call returns.
  virtual void synchronize() {}

  // Whether sample() runs here (on the device, so only tokens come back); when not,
  // the engine reads the logits back and samples on the host (engine/core/sampler.h).
  virtual bool samples() const { return false; }
  // Samples rows.size() rows of `logits` ([rows.size(), vocab] in this backend's memory)
  // as sample_row does on the host: the same tokens for the same seeds and draws, the
  // raw distribution's logprobs. Only where samples() is true.
  virtual void sample(const float* logits, int64_t vocab, std::span<const SampleRow> rows, std::span<SampledRow> out) {
    (void)logits, (void)vocab, (void)rows, (void)out;
  }

  // Zeroed memory for activations and caches.
  virtual Result<BackendBuffer> alloc(size_t bytes) = 0;
  // Copies between host memory and a buffer.
  virtual void write(const BackendBuffer& dst, size_t offset, const void* src, size_t bytes) = 0;
  virtual void read(const BackendBuffer& src, size_t offset, void* dst, size_t bytes) = 0;

  // out[t] = table[ids[t]] as float32. table: [vocab, dim]; out: [n, dim].
  virtual void embedding(const TensorView& table, const TokenId* ids, int64_t n, float* out) = 0;
  // y[t, r] = sum_c w[r, c] * x[t, c]. w: [rows, cols]; x: [n, cols]; y: [n, rows].
  virtual void matmul(const TensorView& w, const float* x, int64_t n, float* y) = 0;
  // matmul for several matrices with the same cols over the same x (at most 4), which a
  // backend may run as one op.
  virtual void matmuls(const float* x, int64_t n, std::span<const MatmulTarget> targets) {
    for (const MatmulTarget& t : targets) matmul(*t.w, x, n, t.y);
  }
  // out = x / rms(x) * weight, per row. x, out: [n, dim] (out may be x); weight: [dim].
  virtual void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) = 0;
  // out = (x - mean) / sqrt(var + eps) * weight + bias, per row. x, out: [n, dim] (out
  // may be x); weight, bias: [dim] (bias may be null).
  virtual void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                          float* out) = 0;
  // x[t, h, :rotary_dim] rotated by positions[t] * inv_freq, the rest of each head kept.
  // x: [n, n_heads, head_dim]; inv_freq: [rotary_dim / 2].
  virtual void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim,
                    const int32_t* positions, const float* inv_freq, RopeStyle style) = 0;
  virtual void kv_store(const kernels::KvStoreParams& p) = 0;
  // rope of q ([p.n_tokens, n_heads, p.head_dim]) and of k ([p.n_tokens, p.n_kv_heads,
  // p.head_dim], p.k == k) in place, then kv_store(p): one call, so that a backend can do
  // it in one pass (the CUDA backend: one launch for the three).
  virtual void rope_kv_store(float* q, float* k, int64_t n_heads, int64_t rotary_dim, const int32_t* positions,
                             const float* inv_freq, RopeStyle style, const kernels::KvStoreParams& p) {
    rope(q, p.n_tokens, n_heads, p.head_dim, rotary_dim, positions, inv_freq, style);
    rope(k, p.n_tokens, p.n_kv_heads, p.head_dim, rotary_dim, positions, inv_freq, style);
    kv_store(p);
  }
  virtual void attention(const kernels::AttentionStep& p) = 0;
  // out = silu(gate) * up over n values.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // out = (silu(gate) * up) w^T over [n, w.cols()] activations, leaving gate holding
  // silu(gate) * up (a down adapter reads it): one call, so that a backend can compute the
  // activation as it prepares the product's input.
  virtual void swiglu_matmul(const TensorView& w, float* gate, const float* up, int64_t n, float* out) {
    swiglu(gate, up, n * w.cols(), gate);
    matmul(w, gate, n, out);
  }
  // out = gelu(x) (* up when up is given: GeGLU) over n values, exact or tanh form.
  virtual void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) = 0;
  // y += x over n values.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // x *= s over n values.
  virtual void scale(float* x, int64_t n, float s) = 0;
  // x = cap * tanh(x / cap) over n values (Gemma 2's final logits); cap > 0.
  virtual void softcap(float* x, int64_t n, float cap) = 0;
  // The residual add fused with the next norm: x += delta, then out = rms_norm(x) *
  // weight; x, delta, out: [n, dim] (out may be delta). Same result as add + rms_norm.
  virtual void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                            float* out) {
    add(x, delta, n * dim);
    rms_norm(x, weight, n, dim, eps, out);
  }
  // x[t] += bias, x: [n, dim].
  virtual void add_bias(float* x, const float* bias, int64_t n, int64_t dim) = 0;
  // out[i] = x[rows[i]] for i < n. x: [*, dim]; out: [n, dim]; rows: backend memory
  // (a StepInput's logit_rows or hidden_rows).
  virtual void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) = 0;
  // out[t, j] = x[t, perm[j]] for t < n, j < cols: a matrix's inputs in the column order
  // its weights are stored in (act-order GPTQ). x, out: [n, cols] (distinct); perm:
  // backend memory, a permutation of [0, cols).
  virtual void permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) = 0;
  // Mixture of experts: each of n tokens' r.k experts by its router logits ([n,
  // r.n_experts]) into ids and weights ([n, k], backend memory; r.bias too;
  // kernels/reference's moe_route).
  virtual void moe_route(const float* logits, int64_t n, const kernels::MoeRouting& r, int32_t* ids,
                         float* weights) = 0;
  // out[t] = sum_j weights[t, j] * rows[pos[t, j]]: each token's experts' rows combined.
  // rows: [*, dim]; pos, weights: [n, k]; out: [n, dim] (not aliasing rows).
  virtual void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k,
                           int64_t dim, float* out) = 0;
  // LoRA products of one matrix over a step (kernels/lora_params.h): y[t] += scale *
  // B (A x[t]) for each row t whose adapter slot adapts the matrix; p.row_slot is the
  // StepInput's adapters, p.factors and p.scratch backend memory.
  virtual void lora(const kernels::LoraProduct& p) = 0;
  // x[t, i] *= sigmoid(gate[t]): x [n, dim], gate [n] (a shared expert's output by its gate).
  virtual void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) = 0;
};

// Backend names: "cpu", "cpu-reference" (the scalar reference kernels), "cuda" / "cuda:N"
// where the build has CUDA; make_backend (engine/backends.h) creates one.
// The device index of "cuda" (0) or "cuda:N"; kInvalidArgument for anything else. Built
// everywhere, so flags are checked the same way in every build.
Result<int> cuda_device_from_name(std::string_view name);

}  // namespace hearth
