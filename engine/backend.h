// Backend: the ops of the Llama forward pass, implemented once per device kind.
//
// The model (model.h) is written once against this interface; the CPU backend is the
// reference every other backend is tested against. A backend owns the memory it hands
// out (activations, KV cache); all pointers passed to ops point into such memory or, for
// weights, into the model's tensors as the backend can read them. Ops are called from
// one thread (the engine's step loop); a backend may use its own threads inside an op.
// Ops never fail on valid shapes: shapes are validated when the model is created.
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
#include "kernels/attention_params.h"

namespace hearth {

enum class BackendOp : uint8_t {
  kEmbedding,  // rows of a weight table, dequantized
  kMatmul,     // activations x weight matrix^T
  kRmsNorm,
  kRope,
  kKvStore,
  kAttention,
  kSwiglu,
  kAdd,
  kAddRmsNorm,
  kGatherRows,
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

// Where one layer's K and V rows go: token t of the batch is stored at cache slot
// slots[t] (= block * block_size + offset), in the layouts of kernels/attention_params.h.
struct KvStoreParams {
  const float* k = nullptr;       // [n_tokens, n_kv_heads * head_dim]
  const float* v = nullptr;       // [n_tokens, n_kv_heads * head_dim]
  float* k_cache = nullptr;       // [n_blocks, n_kv_heads, head_dim, block_size] of this layer
  float* v_cache = nullptr;       // [n_blocks, n_kv_heads, block_size, head_dim]
  const int32_t* slots = nullptr;  // [n_tokens]
  int64_t n_tokens = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 0;
};

// One matrix of a matmuls() call and where its product goes.
struct MatmulTarget {
  const TensorView* w = nullptr;
  float* y = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu", "cuda:0".
  virtual std::string_view name() const = 0;
  // Whether `op` is implemented (for weights of `type`, where the op reads weights).
  virtual bool supports(BackendOp op, DType type = DType::kF32) const = 0;

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
  // x[t, h, :] rotated by positions[t] * inv_freq. x: [n, n_heads, head_dim]; inv_freq: [head_dim / 2].
  virtual void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
                    const float* inv_freq, RopeStyle style) = 0;
  virtual void kv_store(const KvStoreParams& p) = 0;
  // Causal attention of p.n_tokens queries of one sequence over its cached keys.
  virtual void attention(const kernels::AttentionParams& p) = 0;
  // The same for several sequences of a batch at once (a backend may run them together).
  virtual void attention_batch(std::span<const kernels::AttentionParams> ps) {
    for (const auto& p : ps) attention(p);
  }
  // out = silu(gate) * up over n values.
  virtual void swiglu(const float* gate, const float* up, int64_t n, float* out) = 0;
  // y += x over n values.
  virtual void add(float* y, const float* x, int64_t n) = 0;
  // The residual add fused with the next norm: x += delta, then out = rms_norm(x) *
  // weight; x, delta, out: [n, dim] (out may be delta). Same result as add + rms_norm.
  virtual void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                            float* out) {
    add(x, delta, n * dim);
    rms_norm(x, weight, n, dim, eps, out);
  }
  // x[t] += bias, x: [n, dim].
  virtual void add_bias(float* x, const float* bias, int64_t n, int64_t dim) = 0;
  // out[i] = x[rows[i]] for i < n. x: [*, dim]; out: [n, dim]; rows: host memory.
  virtual void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) = 0;
};

struct CpuBackendOptions {
  bool use_reference = false;  // the scalar reference kernels, one thread (tests and debugging)
  int threads = 0;             // 0: default_thread_count() (HEARTH_THREADS, else every core)
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

}  // namespace hearth
