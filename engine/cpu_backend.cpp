// The CPU backend: host memory, kernels/cpu for the ops (or kernels/reference when
// asked, for tests). Single-threaded for now; the step loop calls it from one thread.
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/backend.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/reference/reference.h"

namespace hearth {
namespace {

constexpr size_t kAlignment = 64;

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options) : reference_(options.use_reference) {}

  std::string_view name() const override { return reference_ ? "cpu-reference" : "cpu"; }

  bool supports(BackendOp, DType) const override { return true; }  // every op, every DType

  Result<BackendBuffer> alloc(size_t bytes) override {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) {
      return make_error(ErrorCode::kResourceExhausted, "cannot allocate {} MiB of host memory", bytes >> 20);
    }
    std::memset(p, 0, rounded);
    return BackendBuffer(p, bytes, [](void* q) noexcept { std::free(q); });
  }

  void write(const BackendBuffer& dst, size_t offset, const void* src, size_t bytes) override {
    std::memcpy(static_cast<std::byte*>(dst.data()) + offset, src, bytes);
  }

  void read(const BackendBuffer& src, size_t offset, void* dst, size_t bytes) override {
    std::memcpy(dst, static_cast<const std::byte*>(src.data()) + offset, bytes);
  }

  void embedding(const TensorView& table, const TokenId* ids, int64_t n, float* out) override {
    const int64_t dim = table.cols();
    const auto row_bytes = static_cast<int64_t>(*dtype_bytes(table.dtype, dim));
    for (int64_t t = 0; t < n; ++t) {
      const std::byte* row = table.data + ids[t] * row_bytes;
      if (reference_) {
        kernels::ref::dequantize_row(table.dtype, row, out + t * dim, dim);
      } else {
        kernels::cpu::dequantize_row(table.dtype, row, out + t * dim, dim);
      }
    }
  }

  void matmul(const TensorView& w, const float* x, int64_t n, float* y) override {
    if (reference_) {
      kernels::ref::matmul(w.dtype, w.data, w.rows(), w.cols(), x, n, y);
      return;
    }
    if (scratch_.size() < static_cast<size_t>(w.cols())) scratch_.resize(static_cast<size_t>(w.cols()));
    const kernels::cpu::MatmulParams p{w.dtype, w.data, w.rows(), w.cols(), x, n, y};
    kernels::cpu::matmul_rows(p, 0, w.rows(), scratch_.data());
  }

  void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    if (reference_) {
      kernels::ref::rms_norm(x, weight, n, dim, eps, out);
    } else {
      kernels::cpu::rms_norm(x, weight, n, dim, eps, out);
    }
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions, const float* inv_freq,
            RopeStyle style) override {
    if (reference_) {
      kernels::ref::rope(x, n, n_heads, head_dim, positions, inv_freq, style);
    } else {
      kernels::cpu::rope(x, n, n_heads, head_dim, positions, inv_freq, style);
    }
  }

  void kv_store(const KvStoreParams& p) override {
    const size_t row = static_cast<size_t>(p.kv_dim) * sizeof(float);
    for (int64_t t = 0; t < p.n_tokens; ++t) {
      std::memcpy(p.k_cache + static_cast<int64_t>(p.slots[t]) * p.kv_dim, p.k + t * p.kv_dim, row);
      std::memcpy(p.v_cache + static_cast<int64_t>(p.slots[t]) * p.kv_dim, p.v + t * p.kv_dim, row);
    }
  }

  void attention(const kernels::AttentionParams& p) override {
    if (reference_) {
      kernels::ref::attention(p);
    } else {
      kernels::cpu::attention(p, 0, p.n_heads);
    }
  }

  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    if (reference_) {
      kernels::ref::swiglu(gate, up, n, out);
    } else {
      kernels::cpu::swiglu(gate, up, n, out);
    }
  }

  void add(float* y, const float* x, int64_t n) override { kernels::cpu::add(y, x, n); }

  void add_bias(float* x, const float* bias, int64_t n, int64_t dim) override {
    kernels::cpu::add_bias(x, bias, n, dim);
  }

  void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) override {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out + i * dim, x + static_cast<int64_t>(rows[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
    }
  }

 private:
  bool reference_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace hearth
