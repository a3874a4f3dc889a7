// The CUDA backend: device memory from cudaMalloc, one stream every op and collective
// runs on in order, kernels/cuda for the ops and cuBLASLt for F16/BF16 products over
// several tokens. Correct first: the kernels are the simple ones of kernels/cuda/ops.h,
// and every op is tested against the CPU backend (tests/unit/cuda/cuda_backend_test.cpp).
// An op that fails on the device aborts the process (HEARTH_CHECK): its inputs were
// validated before the step, so a failure is a broken device or a bug, and the engine's
// supervisor restarts the rank, whose group re-forms and resumes its requests.
#include "engine/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/log.h"
#include "engine/cuda/cuda_handles.h"
#include "kernels/cuda/device_info.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"
#include "ipc/device_memory.h"

namespace hearth {
namespace {

constexpr size_t kWeightAlignment = 256;
constexpr int64_t kCublasMinTokens = 8;  // fewer tokens: the matvec kernel reads the weights once either way
constexpr size_t kCublasWorkspace = 32u << 20;

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

void check_cuda(cudaError_t e, const char* what) {
  HEARTH_CHECK(e == cudaSuccess) << "CUDA " << what << " failed: " << cuda_error_text(e)
                                 << (cuda_error_is_sticky(e) ? " (the device context is lost; the rank exits)" : "");
}

// The bound weights: in a private copy (slab_) or in the loader's shared slab (shared_).
class DeviceWeights final : public BoundWeights {
 public:
  DeviceWeights(DeviceBuffer slab, std::vector<TensorView> views) : slab_(std::move(slab)), views_(std::move(views)) {}
  DeviceWeights(std::shared_ptr<const SharedDeviceMemory> shared, std::vector<TensorView> views)
      : shared_(std::move(shared)), views_(std::move(views)) {}
  std::span<const TensorView> tensors() const override { return views_; }

 private:
  DeviceBuffer slab_;
  std::shared_ptr<const SharedDeviceMemory> shared_;
  std::vector<TensorView> views_;
};

// RAII for the cuBLASLt descriptors of one product.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtDescriptors() {
    const CublasLtApi& lt = cublaslt();
    if (pref != nullptr) lt.preference_destroy(pref);
    if (c != nullptr) lt.layout_destroy(c);
    if (b != nullptr) lt.layout_destroy(b);
    if (a != nullptr) lt.layout_destroy(a);
    if (op != nullptr) lt.desc_destroy(op);
  }
};

class CudaBackend final : public Backend {
 public:
  static Result<std::unique_ptr<Backend>> create(int device) {
    const int count = kernels::cuda::device_count();
    if (count == 0) {
      return make_error(ErrorCode::kUnavailable, "no CUDA device is visible to this process (check the driver, "
                        "nvidia-smi and CUDA_VISIBLE_DEVICES)");
    }
    if (device < 0 || device >= count) {
      return make_error(ErrorCode::kInvalidArgument, "CUDA device {} does not exist: this machine has {} (0..{})",
                        device, count, count - 1);
    }
    if (const cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      return cuda_status(e, fmt::format("cannot use CUDA device {}", device));
    }
    cudaDeviceProp prop{};
    if (const cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
      return cuda_status(e, fmt::format("cannot read CUDA device {}'s properties", device));
    }
    std::unique_ptr<CudaBackend> b(new CudaBackend(fmt::format("cuda:{}", device)));
    b->sm_count_ = prop.multiProcessorCount;
    HEARTH_ASSIGN_OR_RETURN(b->stream_, cuda_stream_create());
    HEARTH_ASSIGN_OR_RETURN(b->uploaded_, cuda_event_create());
    HEARTH_ASSIGN_OR_RETURN(b->lt_, cublaslt_create());
    HEARTH_ASSIGN_OR_RETURN(b->workspace_, DeviceBuffer::device(kCublasWorkspace, "the cuBLASLt workspace"));
    return std::unique_ptr<Backend>(std::move(b));
  }

  DeviceQueue queue() const override { return {stream_.get()}; }
  std::string_view name() const override { return name_; }

  bool supports(BackendOp op, DType type) const override {
    if (op == BackendOp::kMatmul || op == BackendOp::kEmbedding) return dtype_row_group(type) == 1;
    return true;
  }

  Result<std::unique_ptr<BoundWeights>> bind_weights(std::span<const TensorView> tensors,
                                                     std::string_view layout) override {
    if (layout != kLayoutPlain) {
      return make_error(ErrorCode::kUnsupported,
                        "the {} backend cannot read weights laid out as \"{}\" (the CPU kernels' interleaved rows); "
                        "start hearth-loader with --layout plain", name_, layout);
    }
    size_t total = 0;
    for (const TensorView& t : tensors) {
      if (dtype_row_group(t.dtype) > 1) {
        return make_error(ErrorCode::kFormat, "tensor {} is {}, which a plain layout never holds", t.name,
                          dtype_name(t.dtype));
      }
      total = align_up(total, kWeightAlignment) + t.bytes;
    }
    // The loader's slab mirrors the rank's weights; another model's tensors (a draft
    // model's, none of them in the slab) are copied like any weights without one.
    if (shared_slab_ != nullptr) {
      const auto inside = std::count_if(tensors.begin(), tensors.end(), [&](const TensorView& t) { return in_slab(t); });
      if (inside == static_cast<std::ptrdiff_t>(tensors.size())) return bind_in_slab(tensors);
      if (inside > 0) {
        return make_error(ErrorCode::kInternal, "{} of the model's {} tensors are in the loader's slab, the others not",
                          inside, tensors.size());
      }
    }
    HEARTH_ASSIGN_OR_RETURN(DeviceBuffer slab, DeviceBuffer::device(total, "the model's weights"));
    std::vector<TensorView> views(tensors.begin(), tensors.end());
    size_t offset = 0;
    for (TensorView& v : views) {
      offset = align_up(offset, kWeightAlignment);
      auto* dst = static_cast<std::byte*>(slab.data()) + offset;
      if (const cudaError_t e = cudaMemcpyAsync(dst, v.data, v.bytes, cudaMemcpyHostToDevice, stream_.get());
          e != cudaSuccess) {
        return cuda_status(e, fmt::format("copying {} to {}", v.name, name_));
      }
      v.data = dst;
      offset += v.bytes;
    }
    if (const cudaError_t e = cudaStreamSynchronize(stream_.get()); e != cudaSuccess) {
      return cuda_status(e, fmt::format("copying the weights to {}", name_));
    }
    HEARTH_LOG_INFO("{}: {} tensors, {} MiB of weights in device memory", name_, views.size(), total >> 20);
    return std::unique_ptr<BoundWeights>(new DeviceWeights(std::move(slab), std::move(views)));
  }

  void use_slab(std::shared_ptr<const SharedDeviceMemory> slab, std::span<const std::byte> host) {
    shared_slab_ = std::move(slab);
    slab_host_ = host;
  }

  // The step's arrays packed into pinned memory and copied in one transfer. The pinned
  // buffer is rewritten only after the previous step's copy has completed.
  StepInput upload(const ModelInput& in) override {
    const std::span<const int32_t> parts[] = {in.tokens,     in.positions, in.slots,      in.query_start, in.page_start,
                                              in.pages,      in.logit_rows, in.hidden_rows, in.adapters};
    size_t offsets[std::size(parts)];
    size_t bytes = 0;
    for (size_t i = 0; i < std::size(parts); ++i) {
      offsets[i] = bytes;
      bytes = align_up(bytes + parts[i].size_bytes(), 16);
    }
    check_cuda(cudaEventSynchronize(uploaded_.get()), "waiting for the previous step's upload");
    if (bytes > staging_host_.bytes()) {
      check_cuda(cudaStreamSynchronize(stream_.get()), "draining the stream before growing the step buffers");
      const size_t want = std::max(bytes, 2 * staging_host_.bytes());
      auto host = DeviceBuffer::pinned_host(want, "the step input");
      auto dev = DeviceBuffer::device(want, "the step input");
      HEARTH_CHECK(host.is_ok() && dev.is_ok()) << "cannot grow the step input buffers to " << want << " bytes";
      staging_host_ = std::move(host).value();
      staging_dev_ = std::move(dev).value();
    }
    auto* host = static_cast<std::byte*>(staging_host_.data());
    for (size_t i = 0; i < std::size(parts); ++i) {
      if (!parts[i].empty()) std::memcpy(host + offsets[i], parts[i].data(), parts[i].size_bytes());
    }
    check_cuda(cudaMemcpyAsync(staging_dev_.data(), host, bytes, cudaMemcpyHostToDevice, stream_.get()),
               "uploading the step input");
    check_cuda(cudaEventRecord(uploaded_.get(), stream_.get()), "recording the upload");
    const auto* dev = static_cast<const std::byte*>(staging_dev_.data());
    auto at = [&](size_t i) { return reinterpret_cast<const int32_t*>(dev + offsets[i]); };
    return {.tokens = at(0),
            .positions = at(1),
            .slots = at(2),
            .query_start = at(3),
            .page_start = at(4),
            .pages = at(5),
            .logit_rows = at(6),
            .hidden_rows = at(7),
            .adapters = in.adapters.empty() ? nullptr : at(8),
            .n_tokens = in.n_tokens(),
            .n_seqs = in.n_seqs(),
            .n_logit_rows = static_cast<int32_t>(in.logit_rows.size()),
            .n_hidden_rows = static_cast<int32_t>(in.hidden_rows.size()),
            .block_size = in.block_size,
            .max_keys = in.max_keys()};
  }

  Result<BackendBuffer> alloc(size_t bytes) override {
    if (bytes == 0) return BackendBuffer();
    HEARTH_ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::device(bytes, fmt::format("memory on {}", name_)));
    if (const cudaError_t e = cudaMemsetAsync(buf.data(), 0, bytes, stream_.get()); e != cudaSuccess) {
      return cuda_status(e, "zeroing device memory");
    }
    return BackendBuffer(buf.release(), bytes, [](void* q, size_t) noexcept { cudaFree(q); });
  }

  void write(const BackendBuffer& dst, size_t offset, const void* src, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(static_cast<std::byte*>(dst.data()) + offset, src, bytes, cudaMemcpyHostToDevice,
                               stream_.get()),
               "copying to the device");
    check_cuda(cudaStreamSynchronize(stream_.get()), "copying to the device");
  }

  void read(const BackendBuffer& src, size_t offset, void* dst, size_t bytes) override {
    check_cuda(cudaMemcpyAsync(dst, static_cast<const std::byte*>(src.data()) + offset, bytes, cudaMemcpyDeviceToHost,
                               stream_.get()),
               "copying from the device");
    check_cuda(cudaStreamSynchronize(stream_.get()), "the step");
  }

  void synchronize() override { check_cuda(cudaStreamSynchronize(stream_.get()), "the step"); }

  bool samples() const override { return true; }

  // The rows' parameters and penalty tokens go up in one buffer, the kernels of
  // kernels/cuda/sampling.cu run, and only the results come back.
  void sample(const float* logits, int64_t vocab, std::span<const SampleRow> rows, std::span<SampledRow> out) override {
    if (rows.empty()) return;
    sample_params_.assign(rows.size(), {});
    sample_tokens_.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampleRow& r = rows[i];
      kernels::cuda::SampleRowParams& p = sample_params_[i];
      p.sampling = r.sampling;
      p.draw = r.draw;
      p.top_logprobs = r.top_logprobs;
      const SamplingParams& sp = r.sampling;
      if (sp.repetition_penalty != 1.0f || sp.presence_penalty != 0.0f || sp.frequency_penalty != 0.0f) {
        p.output_begin = static_cast<int32_t>(sample_tokens_.size());
        p.output_count = static_cast<int32_t>(r.output.size());
        sample_tokens_.insert(sample_tokens_.end(), r.output.begin(), r.output.end());
        if (sp.repetition_penalty != 1.0f) {
          p.prompt_begin = static_cast<int32_t>(sample_tokens_.size());
          p.prompt_count = static_cast<int32_t>(r.prompt.size());
          sample_tokens_.insert(sample_tokens_.end(), r.prompt.begin(), r.prompt.end());
        }
      }
    }
    const size_t params_bytes = align_up(rows.size() * sizeof(kernels::cuda::SampleRowParams), 256);
    const size_t tokens_bytes = align_up(std::max<size_t>(sample_tokens_.size(), 1) * sizeof(int32_t), 256);
    const size_t results_bytes = rows.size() * sizeof(kernels::cuda::SampleRowResult);
    auto* in = static_cast<std::byte*>(scratch(sample_in_, params_bytes + tokens_bytes + results_bytes, "sampling"));
    check_cuda(cudaMemcpyAsync(in, sample_params_.data(), rows.size() * sizeof(kernels::cuda::SampleRowParams),
                               cudaMemcpyHostToDevice, stream_.get()),
               "copying the sampling parameters");
    if (!sample_tokens_.empty()) {
      check_cuda(cudaMemcpyAsync(in + params_bytes, sample_tokens_.data(), sample_tokens_.size() * sizeof(int32_t),
                                 cudaMemcpyHostToDevice, stream_.get()),
                 "copying the penalty tokens");
    }
    kernels::cuda::SampleParams p;
    p.logits = logits;
    p.n_rows = static_cast<int64_t>(rows.size());
    p.vocab = vocab;
    p.rows = reinterpret_cast<const kernels::cuda::SampleRowParams*>(in);
    p.tokens = reinterpret_cast<const int32_t*>(in + params_bytes);
    p.out = reinterpret_cast<kernels::cuda::SampleRowResult*>(in + params_bytes + tokens_bytes);
    p.scratch_bytes = kernels::cuda::sample_scratch_bytes(p.n_rows, vocab);
    p.scratch = scratch(sample_scratch_, p.scratch_bytes, "sampling scratch");
    check_cuda(kernels::cuda::sample(p, stream_.get()), "sampling");
    sample_results_.resize(rows.size());
    check_cuda(cudaMemcpyAsync(sample_results_.data(), p.out, results_bytes, cudaMemcpyDeviceToHost, stream_.get()),
               "copying the sampled tokens");
    check_cuda(cudaStreamSynchronize(stream_.get()), "the step");
    for (size_t i = 0; i < rows.size(); ++i) {
      const kernels::cuda::SampleRowResult& r = sample_results_[i];
      SampledRow& o = out[i];
      o.id = r.id;
      o.logprob = r.logprob;
      o.n_top = r.n_top;
      o.top_id = r.top_id;
      o.top_logit = r.top_logit;
      for (int32_t j = 0; j < r.n_top; ++j) {
        o.top_ids[static_cast<size_t>(j)] = r.top_ids[j];
        o.top_logprobs[static_cast<size_t>(j)] = r.top_logprobs[j];
      }
    }
  }

  void embedding(const TensorView& table, const TokenId* ids, int64_t n, float* out) override {
    check_cuda(kernels::cuda::embedding(table.dtype, table.data, table.cols(), ids, n, out, stream_.get()),
               "embedding");
  }

  void matmul(const TensorView& w, const float* x, int64_t n, float* y) override {
    if ((w.dtype == DType::kF16 || w.dtype == DType::kBF16) && n >= kCublasMinTokens &&
        lt_matmul(w, x, n, y)) {
      return;
    }
    check_cuda(kernels::cuda::matmul(product(w, x, n, y), stream_.get()), "matmul");
  }

  void swiglu_matmul(const TensorView& w, float* gate, const float* up, int64_t n, float* out) override {
    if (w.dtype != DType::kQ8_0 && w.dtype != DType::kQ4_0) {  // 16-bit weights may take cuBLASLt
      Backend::swiglu_matmul(w, gate, up, n, out);
      return;
    }
    check_cuda(kernels::cuda::swiglu_matmul(product(w, gate, n, out), gate, up, stream_.get()), "swiglu_matmul");
  }

  void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    check_cuda(kernels::cuda::rms_norm(x, weight, n, dim, eps, out, stream_.get()), "rms_norm");
  }

  void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                  float* out) override {
    check_cuda(kernels::cuda::layer_norm(x, weight, bias, n, dim, eps, out, stream_.get()), "layer_norm");
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim, const int32_t* positions,
            const float* inv_freq, RopeStyle style) override {
    check_cuda(kernels::cuda::rope(x, n, n_heads, head_dim, rotary_dim, positions, inv_freq,
                                   style == RopeStyle::kInterleaved, stream_.get()),
               "rope");
  }

  void kv_store(const kernels::KvStoreParams& p) override {
    check_cuda(kernels::cuda::kv_store(p, stream_.get()), "kv_store");
  }

  void rope_kv_store(float* q, float* k, int64_t n_heads, int64_t rotary_dim, const int32_t* positions,
                     const float* inv_freq, RopeStyle style, const kernels::KvStoreParams& p) override {
    check_cuda(kernels::cuda::rope_kv_store(q, k, n_heads, rotary_dim, positions, inv_freq,
                                            style == RopeStyle::kInterleaved, p, stream_.get()),
               "rope_kv_store");
  }

  // Split over the keys (flash-decoding) where the step's (token, head) pairs alone
  // leave SMs idle: decode of few sequences over long contexts.
  void attention(const kernels::AttentionStep& p) override {
    kernels::cuda::AttentionSplit split;
    split.splits = kernels::cuda::attention_splits(p.n_tokens, p.n_heads, p.max_keys, sm_count_);
    if (split.splits > 1) {
      split.scratch_bytes = kernels::cuda::attention_scratch_bytes(p.n_tokens, p.n_heads, p.head_dim, split.splits);
      split.scratch = static_cast<float*>(scratch(attention_scratch_, split.scratch_bytes, "split attention"));
    }
    check_cuda(kernels::cuda::attention(p, split, stream_.get()), "attention");
  }

  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    check_cuda(kernels::cuda::swiglu(gate, up, n, out, stream_.get()), "swiglu");
  }

  void moe_route(const float* logits, int64_t n, const kernels::MoeRouting& r, int32_t* ids,
                 float* weights) override {
    check_cuda(kernels::cuda::moe_route(logits, n, r, ids, weights, stream_.get()), "moe_route");
  }

  void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                   float* out) override {
    check_cuda(kernels::cuda::moe_combine(rows, pos, weights, n, k, dim, out, stream_.get()), "moe_combine");
  }

  void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) override {
    check_cuda(kernels::cuda::gelu(x, up, n, tanh_form, out, stream_.get()), "gelu");
  }

  void lora(const kernels::LoraProduct& p) override { check_cuda(kernels::cuda::lora(p, stream_.get()), "lora"); }

  void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) override {
    check_cuda(kernels::cuda::sigmoid_gate_rows(x, gate, n, dim, stream_.get()), "sigmoid_gate_rows");
  }
  void softcap(float* x, int64_t n, float cap) override {
    check_cuda(kernels::cuda::softcap(x, n, cap, stream_.get()), "softcap");
  }
  void scale(float* x, int64_t n, float s) override {
    check_cuda(kernels::cuda::scale(x, n, s, stream_.get()), "scale");
  }

  void add(float* y, const float* x, int64_t n) override {
    check_cuda(kernels::cuda::add(y, x, n, stream_.get()), "add");
  }

  void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                    float* out) override {
    check_cuda(kernels::cuda::add_rms_norm(x, delta, weight, n, dim, eps, out, stream_.get()), "add_rms_norm");
  }

  void add_bias(float* x, const float* bias, int64_t n, int64_t dim) override {
    check_cuda(kernels::cuda::add_bias(x, bias, n, dim, stream_.get()), "add_bias");
  }

  void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) override {
    check_cuda(kernels::cuda::gather_rows(x, rows, n, dim, out, stream_.get()), "gather_rows");
  }

  void permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) override {
    check_cuda(kernels::cuda::permute_columns(x, n, cols, perm, out, stream_.get()), "permute_columns");
  }

 private:
  explicit CudaBackend(std::string name) : name_(std::move(name)) {}

  // A scratch buffer of at least `bytes`, grown (after draining the stream, which may
  // still read the old one) when a larger product comes; null for 0 bytes.
  void* scratch(DeviceBuffer& buf, size_t bytes, const char* what) {
    if (bytes == 0) return nullptr;
    if (bytes > buf.bytes()) {
      check_cuda(cudaStreamSynchronize(stream_.get()), "draining the stream before growing a scratch buffer");
      auto grown = DeviceBuffer::device(std::max(bytes, 2 * buf.bytes()), what);
      HEARTH_CHECK(grown.is_ok()) << grown.status().to_string();
      buf = std::move(grown).value();
    }
    return buf.data();
  }

  // The kernels' description of y = x w^T on this device, with scratch for its quantized
  // activations and split sums.
  kernels::cuda::MatmulParams product(const TensorView& w, const float* x, int64_t n, float* y) {
    kernels::cuda::MatmulParams p{.type = w.dtype, .w = w.data, .rows = w.rows(), .cols = w.cols(), .x = x,
                                  .n_tokens = n, .y = y, .sm_count = sm_count_};
    p.scratch_bytes = kernels::cuda::matmul_scratch_bytes(p);
    p.scratch = scratch(scratch_, p.scratch_bytes, "quantized activations and split sums");
    return p;
  }

  // y = x w^T through cuBLASLt, the activations rounded to w's 16-bit type first; false
  // when cuBLASLt has no algorithm for the shape (the kernel runs it instead).
  bool lt_matmul(const TensorView& w, const float* x, int64_t n, float* y) {
    const int64_t rows = w.rows(), cols = w.cols();
    void* x16 = scratch(act16_, static_cast<size_t>(n * cols) * 2, "16-bit activations");
    check_cuda(kernels::cuda::convert_activations(x, n * cols, w.dtype, x16, stream_.get()), "converting activations");
    const cudaDataType_t ab = w.dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
    LtDescriptors d;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const size_t ws = workspace_.bytes();
    // Column-major: A is w as [cols, rows] (ld cols), transposed; B is x as [cols, n];
    // D is y as [rows, n] (ld rows), which is y's row-major [n, rows].
    const CublasLtApi& lt = cublaslt();
    bool ok = lt.desc_create(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS &&
              lt.desc_set_attribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) == CUBLAS_STATUS_SUCCESS &&
              lt.desc_set_attribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) == CUBLAS_STATUS_SUCCESS &&
              lt.layout_create(&d.a, ab, static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), cols) ==
                  CUBLAS_STATUS_SUCCESS &&
              lt.layout_create(&d.b, ab, static_cast<uint64_t>(cols), static_cast<uint64_t>(n), cols) ==
                  CUBLAS_STATUS_SUCCESS &&
              lt.layout_create(&d.c, CUDA_R_32F, static_cast<uint64_t>(rows), static_cast<uint64_t>(n), rows) ==
                  CUBLAS_STATUS_SUCCESS &&
              lt.preference_create(&d.pref) == CUBLAS_STATUS_SUCCESS &&
              lt.preference_set_attribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws) ==
                  CUBLAS_STATUS_SUCCESS;
    if (!ok) return false;
    cublasLtMatmulHeuristicResult_t heuristic{};
    int found = 0;
    if (lt.algo_get_heuristic(lt_.get(), d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heuristic, &found) !=
            CUBLAS_STATUS_SUCCESS ||
        found == 0) {
      return false;
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t s = lt.matmul(lt_.get(), d.op, &alpha, w.data, d.a, x16, d.b, &beta, y, d.c, y, d.c,
                                       &heuristic.algo, workspace_.data(), ws, stream_.get());
    HEARTH_CHECK(s == CUBLAS_STATUS_SUCCESS) << "cublasLtMatmul failed with status " << static_cast<int>(s) << " on "
                                             << w.name;
    return true;
  }

  bool in_slab(const TensorView& v) const {
    const auto* p = static_cast<const std::byte*>(v.data);
    return p >= slab_host_.data() && p + v.bytes <= slab_host_.data() + slab_host_.size();
  }

  // Views of the tensors in the loader's slab, which mirrors the host region byte for byte.
  Result<std::unique_ptr<BoundWeights>> bind_in_slab(std::span<const TensorView> tensors) {
    std::vector<TensorView> views(tensors.begin(), tensors.end());
    const auto* base = static_cast<const std::byte*>(shared_slab_->data());
    for (TensorView& v : views) {
      const auto* p = static_cast<const std::byte*>(v.data);
      if (p < slab_host_.data() || p + v.bytes > slab_host_.data() + slab_host_.size()) {
        return make_error(ErrorCode::kInternal, "tensor {} is outside the rank's data region the slab mirrors", v.name);
      }
      v.data = const_cast<std::byte*>(base + (p - slab_host_.data()));
    }
    HEARTH_LOG_INFO("{}: {} tensors read in place from the loader's device slab ({} MiB, no copy)", name_, views.size(),
                    slab_host_.size() >> 20);
    return std::unique_ptr<BoundWeights>(new DeviceWeights(shared_slab_, std::move(views)));
  }

  std::string name_;
  std::shared_ptr<const SharedDeviceMemory> shared_slab_;
  std::span<const std::byte> slab_host_;
  CudaStream stream_;
  CudaEvent uploaded_;
  CublasLtHandle lt_;
  DeviceBuffer workspace_;
  DeviceBuffer staging_host_, staging_dev_;
  DeviceBuffer scratch_, act16_;
  DeviceBuffer sample_in_, sample_scratch_;
  DeviceBuffer attention_scratch_;
  int32_t sm_count_ = 0;
  std::vector<kernels::cuda::SampleRowParams> sample_params_;
  std::vector<int32_t> sample_tokens_;
  std::vector<kernels::cuda::SampleRowResult> sample_results_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend(int device) { return CudaBackend::create(device); }

Status cuda_backend_use_slab(Backend& backend, std::shared_ptr<const SharedDeviceMemory> slab,
                             std::span<const std::byte> host_region) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (cuda == nullptr) return make_error(ErrorCode::kInternal, "{} is not a CUDA backend", backend.name());
  if (slab == nullptr || slab->bytes() < host_region.size()) {
    return make_error(ErrorCode::kFormat, "a device slab of {} bytes cannot mirror {} bytes of weights",
                      slab == nullptr ? 0 : slab->bytes(), host_region.size());
  }
  cuda->use_slab(std::move(slab), host_region);
  return Status::ok();
}

}  // namespace hearth
