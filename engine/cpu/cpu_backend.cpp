// The CPU backend: host memory, kernels/cpu for the ops (or kernels/reference when
// asked, for tests), split across a persistent thread pool. Large buffers are anonymous
// mappings, so a KV cache costs memory only for the blocks that get used.
#include "engine/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "common/check.h"
#include "common/log.h"
#include "engine/core/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_tuning.h"
#include "engine/cpu/thread_pool.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/kv_store.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/reference/reference.h"

namespace hearth {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kMapThreshold = 1u << 20;  // larger buffers come from mmap: zero pages on demand

// Rows per task: enough tasks to balance the threads, each big enough to amortise the
// hand-out, a multiple of 16 rows (whole groups of row-interleaved weights).
int64_t rows_per_task(int64_t rows, int threads) {
  if (threads <= 1) return rows;
  const int64_t target = (rows + threads * 8 - 1) / (threads * 8);
  return std::max<int64_t>(16, (target + 15) / 16 * 16);
}

class HostWeights final : public BoundWeights {
 public:
  explicit HostWeights(std::span<const TensorView> tensors) : tensors_(tensors.begin(), tensors.end()) {}
  std::span<const TensorView> tensors() const override { return tensors_; }

 private:
  std::vector<TensorView> tensors_;
};

class CpuBackend final : public Backend {
 public:
  static constexpr size_t kMaxTargets = 4;

  explicit CpuBackend(const CpuBackendOptions& options)
      : reference_(options.use_reference), pool_(options.use_reference ? 1 : options.threads) {}

  std::string_view name() const override { return reference_ ? "cpu-reference" : "cpu"; }
  int threads() const override { return pool_.size(); }

  bool supports(BackendOp, DType) const override { return true; }  // every op, every DType

  // The kernels read plain and R16 layouts alike, in place: the views are the handles.
  Result<std::unique_ptr<BoundWeights>> bind_weights(std::span<const TensorView> tensors,
                                                     std::string_view layout) override {
    if (layout != kLayoutPlain && layout != kLayoutCpuR16) {
      return make_error(ErrorCode::kUnsupported,
                        "the cpu backend cannot read weights laid out as \"{}\"; start hearth-loader with "
                        "--layout cpu-r16 (or plain)", layout);
    }
    for (const TensorView& t : tensors) {
      if (layout == kLayoutPlain && dtype_row_group(t.dtype) > 1) {
        return make_error(ErrorCode::kFormat, "tensor {} is {}, which a plain layout never holds", t.name,
                          dtype_name(t.dtype));
      }
    }
    if (!reference_) {
      HEARTH_RETURN_IF_ERROR(prefetch_env_check());
      tune_prefetch(tensors);
    }
    return std::unique_ptr<BoundWeights>(new HostWeights(tensors));
  }

  // Host memory already: the ops read the input where it is.
  StepInput upload(const ModelInput& in) override {
    return {.tokens = in.tokens.data(),
            .positions = in.positions.data(),
            .slots = in.slots.data(),
            .query_start = in.query_start.data(),
            .page_start = in.page_start.data(),
            .pages = in.pages.data(),
            .logit_rows = in.logit_rows.data(),
            .hidden_rows = in.hidden_rows.data(),
            .adapters = in.adapters.empty() ? nullptr : in.adapters.data(),
            .n_tokens = in.n_tokens(),
            .n_seqs = in.n_seqs(),
            .n_logit_rows = static_cast<int32_t>(in.logit_rows.size()),
            .n_hidden_rows = static_cast<int32_t>(in.hidden_rows.size()),
            .block_size = in.block_size,
            .max_keys = in.max_keys()};
  }

  Result<BackendBuffer> alloc(size_t bytes) override {
    if (bytes >= kMapThreshold) {
      void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        return make_error(ErrorCode::kResourceExhausted, "cannot map {} MiB of host memory", bytes >> 20);
      }
      // No MADV_HUGEPAGE here: a KV cache is touched a block at a time, and a huge page
      // would zero 2 MiB on the first token of every layer.
      return BackendBuffer(p, bytes, [](void* q, size_t n) noexcept { ::munmap(q, n); });
    }
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
    if (p == nullptr) {
      return make_error(ErrorCode::kResourceExhausted, "cannot allocate {} MiB of host memory", bytes >> 20);
    }
    std::memset(p, 0, rounded);
    return BackendBuffer(p, bytes, [](void* q, size_t) noexcept { std::free(q); });
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
    const MatmulTarget target{&w, y};
    matmuls(x, n, std::span(&target, 1));
  }

  // Several matrices over the same activations (Q, K, V; gate, up): the activations are
  // quantized once and every matrix's row chunks go to the pool as one op.
  void matmuls(const float* x, int64_t n, std::span<const MatmulTarget> targets) override {
    if (reference_) {
      for (const MatmulTarget& t : targets) {
        kernels::ref::matmul(t.w->dtype, t.w->data, t.w->rows(), t.w->cols(), x, n, t.y);
      }
      return;
    }
    const int64_t cols = targets[0].w->cols();
    kernels::cpu::QuantizedActivations xq;
    bool quantized = false;
    int64_t work = 0;
    for (const MatmulTarget& t : targets) {
      work += t.w->rows() * cols * n;
      if (!quantized && kernels::cpu::matmul_uses_quantized_activations(t.w->dtype)) {
        const size_t bytes = kernels::cpu::quantized_activation_bytes(n, cols);
        if (scratch_.size() < bytes) scratch_.resize(bytes);
        xq = kernels::cpu::quantized_activations_view(n, cols, scratch_.data());
        for_token_rows(n, cols, [&](int64_t t0, int64_t t1) { kernels::cpu::quantize_activation_rows(x, xq, t0, t1); });
        quantized = true;
      }
    }
    std::array<kernels::cpu::MatmulParams, kMaxTargets> params;
    std::array<int64_t, kMaxTargets + 1> first_task{};  // task ranges per target
    std::array<int64_t, kMaxTargets> chunk{};
    HEARTH_CHECK(targets.size() <= kMaxTargets) << "at most " << kMaxTargets << " matrices per matmuls()";
    for (size_t i = 0; i < targets.size(); ++i) {
      kernels::cpu::MatmulParams& p = params[i];
      const TensorView& w = *targets[i].w;
      p.type = w.dtype;
      p.w = w.data;
      p.rows = w.rows();
      p.cols = cols;
      p.x = x;
      p.n_tokens = n;
      p.y = targets[i].y;
      p.xq = quantized ? &xq : nullptr;
      chunk[i] = pool_.worth_splitting(work) ? rows_per_task(p.rows, pool_.size()) : p.rows;
      first_task[i + 1] = first_task[i] + (p.rows + chunk[i] - 1) / chunk[i];
    }
    const int64_t n_tasks = first_task[targets.size()];
    auto run = [&](int64_t task) {
      size_t i = 0;
      while (task >= first_task[i + 1]) ++i;
      const int64_t r0 = (task - first_task[i]) * chunk[i];
      kernels::cpu::matmul_rows(params[i], r0, std::min(params[i].rows, r0 + chunk[i]));
    };
    if (!pool_.worth_splitting(work)) {
      for (int64_t task = 0; task < n_tasks; ++task) run(task);
      return;
    }
    pool_.parallel_for(n_tasks, run);
  }

  // Chooses the kernels' weight prefetch distance for this host (cpu_tuning.h) once per
  // process, with decode passes over this model's own matrices on this pool. Measuring
  // costs one read of the windows (page faults the first decode step would otherwise
  // take) and 12 passes; a cached or fixed choice costs nothing.
  void tune_prefetch(std::span<const TensorView> tensors) {
    static std::atomic<bool> tuned{false};
    if (tuned.load()) return;
    const auto windows = prefetch_tuning_windows(tensors);
    const bool fixed = kernels::cpu::weight_prefetch_from_env() >= 0;
    if (windows.size() < kMinTuningWindows && !fixed) {
      HEARTH_LOG_DEBUG("weight prefetch {} bytes (default): the model's matrices are too small to measure others",
                       kernels::cpu::weight_prefetch_bytes());
      return;
    }
    if (tuned.exchange(true)) return;
    int64_t max_rows = 0, max_cols = 0;
    double pass_bytes = 0;  // every window holds the same matrices
    for (const TensorView* t : windows.empty() ? std::vector<const TensorView*>{} : windows[0]) {
      max_rows = std::max(max_rows, t->rows());
      max_cols = std::max(max_cols, t->cols());
      pass_bytes += static_cast<double>(t->bytes);
    }
    std::vector<float> x(static_cast<size_t>(max_cols), 0.01f), y(static_cast<size_t>(max_rows));
    auto read = [&](const std::vector<const TensorView*>& window) {
      for (const TensorView* t : window) matmul(*t, x.data(), 1, y.data());
    };
    size_t next = 0;
    auto pass = [&](int) {
      if (next == 0) {
        for (const auto& window : windows) read(window);  // page faults: not a candidate's cost
      }
      const auto& window = windows[next++ % windows.size()];
      const auto begin = std::chrono::steady_clock::now();
      read(window);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    };
    const std::string isa(kernels::cpu::cpu_isa_name(kernels::cpu::cpu_isa()));
    PrefetchTuningOptions o;
    o.key = fmt::format("v{}|{}|{}|{} threads|{}", kPrefetchTuningVersion, kernels::cpu::cpu_model_name(), isa,
                        pool_.size(),
                        windows.empty() ? "-" : std::string(dtype_name(windows[0][0]->dtype)));
    o.cache_file = default_tuning_cache_file();
    o.pass_bytes = pass_bytes;
    o.rounds = 3;
    const PrefetchTuning t = tune_weight_prefetch(o, pass);
    HEARTH_LOG_INFO("cpu kernels on {} ({}, {} threads): {}", kernels::cpu::cpu_model_name(), isa, pool_.size(),
                    t.describe(pass_bytes));
  }

  void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    if (reference_) {
      kernels::ref::rms_norm(x, weight, n, dim, eps, out);
      return;
    }
    for_token_rows(n, dim, [&](int64_t t0, int64_t t1) {
      kernels::cpu::rms_norm(x + t0 * dim, weight, t1 - t0, dim, eps, out + t0 * dim);
    });
  }

  void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                  float* out) override {
    if (reference_) {
      kernels::ref::layer_norm(x, weight, bias, n, dim, eps, out);
      return;
    }
    for_token_rows(n, dim, [&](int64_t t0, int64_t t1) {
      kernels::cpu::layer_norm(x + t0 * dim, weight, bias, t1 - t0, dim, eps, out + t0 * dim);
    });
  }

  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim, const int32_t* positions,
            const float* inv_freq, RopeStyle style) override {
    if (reference_) {
      kernels::ref::rope(x, n, n_heads, head_dim, rotary_dim, positions, inv_freq, style);
    } else {
      kernels::cpu::rope(x, n, n_heads, head_dim, rotary_dim, positions, inv_freq, style);
    }
  }

  void kv_store(const kernels::KvStoreParams& p) override {
    if (reference_) {
      kernels::ref::kv_store(p);
    } else {
      kernels::cpu::kv_store(p);
    }
  }

  // The kernels' calling convention is one sequence at a time: one AttentionParams per
  // sequence of the step, into scratch that grows to the largest batch once.
  void attention(const kernels::AttentionStep& st) override {
    attention_params_.resize(static_cast<size_t>(st.n_seqs));
    for (int32_t s = 0; s < st.n_seqs; ++s) attention_params_[static_cast<size_t>(s)] = kernels::sequence_attention(st, s);
    attention_batch(attention_params_);
  }

  // Every sequence of a step in one op, split by (sequence, run of KV heads: the query
  // heads that share one read its keys and values once) and, when that leaves the
  // threads too little to share, by ranges of query tokens. A task takes adjacent KV
  // heads, as many as still leave each thread two tasks: a block holds its KV heads side
  // by side, so a run of them is one stretch of memory where a single head is 2 KiB here
  // and there (one Zen 4 core, 4096 keys of f16 from memory: 0.89-0.90 ms a pass one
  // head at a time, 0.77-0.80 two, 0.70-0.72 four, 0.64-0.69 all eight). Each (token,
  // head) is computed alone, so no split changes a result.
  void attention_batch(std::span<const kernels::AttentionParams> ps) {
    if (reference_) {
      for (const auto& p : ps) kernels::ref::attention(p);
      return;
    }
    int64_t work = 0;  // every query against its keys, roughly
    for (const auto& p : ps) {
      work += static_cast<int64_t>(p.n_tokens) * p.n_heads * p.head_dim * (p.positions[p.n_tokens - 1] + 1);
    }
    if (!pool_.worth_splitting(work)) {
      for (const auto& p : ps) kernels::cpu::attention(p, 0, p.n_heads);
      return;
    }
    const auto n_seqs = static_cast<int32_t>(ps.size());
    attention_tasks_.assign(ps.size() + 1, 0);  // first task of each sequence
    attention_runs_.resize(ps.size());          // KV heads per task of each sequence
    for (size_t i = 0; i < ps.size(); ++i) {
      const int32_t kv_heads = ps[i].n_kv_heads;
      const int32_t run = std::clamp(kv_heads * n_seqs / (pool_.size() * 2), 1, kv_heads);
      const int32_t runs = (kv_heads + run - 1) / run;
      const int32_t chunks = std::clamp(pool_.size() * 4 / (runs * n_seqs), 1, ps[i].n_tokens);
      attention_runs_[i] = run;
      attention_tasks_[i + 1] = attention_tasks_[i] + static_cast<int64_t>(runs) * chunks;
    }
    pool_.parallel_for(attention_tasks_.back(), [&](int64_t task) {
      size_t i = 0;
      while (task >= attention_tasks_[i + 1]) ++i;
      const kernels::AttentionParams& p = ps[i];
      const int32_t run = attention_runs_[i];
      const int64_t runs = (p.n_kv_heads + run - 1) / run;
      const int64_t local = task - attention_tasks_[i];
      const int64_t chunks = (attention_tasks_[i + 1] - attention_tasks_[i]) / runs;
      const auto kv0 = static_cast<int32_t>(local % runs) * run;
      const int32_t kv1 = std::min(p.n_kv_heads, kv0 + run);
      const auto per_chunk = static_cast<int32_t>((p.n_tokens + chunks - 1) / chunks);
      const int32_t t0 = static_cast<int32_t>(local / runs) * per_chunk;
      const int32_t t1 = std::min(p.n_tokens, t0 + per_chunk);
      if (t0 >= t1) return;
      kernels::AttentionParams part = p;
      const int64_t offset = static_cast<int64_t>(t0) * p.n_heads * p.head_dim;
      part.q = p.q + offset;
      part.out = p.out + offset;
      part.positions = p.positions + t0;
      part.n_tokens = t1 - t0;
      const int32_t group = p.n_heads / p.n_kv_heads;
      kernels::cpu::attention(part, kv0 * group, kv1 * group);
    });
  }

  void swiglu(const float* gate, const float* up, int64_t n, float* out) override {
    if (reference_) {
      kernels::ref::swiglu(gate, up, n, out);
      return;
    }
    for_elements(n, [&](int64_t b, int64_t e) { kernels::cpu::swiglu(gate + b, up + b, e - b, out + b); });
  }

  void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) override {
    if (reference_) {
      kernels::ref::gelu(x, up, n, tanh_form, out);
      return;
    }
    for_elements(n, [&](int64_t b, int64_t e) {
      kernels::cpu::gelu(x + b, up != nullptr ? up + b : nullptr, e - b, tanh_form, out + b);
    });
  }

  void moe_route(const float* logits, int64_t n, const kernels::MoeRouting& r, int32_t* ids,
                 float* weights) override {
    if (reference_) {
      kernels::ref::moe_route(logits, n, r, ids, weights);
    } else {
      kernels::cpu::moe_route(logits, n, r, ids, weights);
    }
  }

  void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                   float* out) override {
    if (reference_) {
      kernels::ref::moe_combine(rows, pos, weights, n, k, dim, out);
      return;
    }
    for_token_rows(n, dim, [&](int64_t t0, int64_t t1) {
      kernels::cpu::moe_combine(rows, pos + t0 * k, weights + t0 * k, t1 - t0, k, dim, out + t0 * dim);
    });
  }

  void lora(const kernels::LoraProduct& p) override {
    if (reference_) {
      kernels::ref::lora(p);
      return;
    }
    // The rows grouped by slot (a counting sort), so that each adapter's factors are read
    // once per block of its rows; then the shrink, split over the threads by blocks of
    // rows (each task writes whole scratch rows of its own), and the expansion, by outputs.
    lora_start_.assign(static_cast<size_t>(p.n_slots) + 1, 0);
    for (int64_t t = 0; t < p.n; ++t) {
      const int32_t s = p.row_slot[t];
      if (s >= 0 && s < p.n_slots && p.factors[s].a != nullptr) ++lora_start_[static_cast<size_t>(s) + 1];
    }
    for (int32_t s = 0; s < p.n_slots; ++s) lora_start_[static_cast<size_t>(s) + 1] += lora_start_[static_cast<size_t>(s)];
    lora_rows_.resize(static_cast<size_t>(lora_start_.back()));
    lora_next_.assign(lora_start_.begin(), lora_start_.end() - 1);
    for (int64_t t = 0; t < p.n; ++t) {
      const int32_t s = p.row_slot[t];
      if (s >= 0 && s < p.n_slots && p.factors[s].a != nullptr) {
        lora_rows_[static_cast<size_t>(lora_next_[static_cast<size_t>(s)]++)] = static_cast<int32_t>(t);
      }
    }
    constexpr int32_t kRowBlock = 8;
    constexpr int64_t kOutChunk = 128;
    lora_tasks_.clear();
    int64_t work = 0;
    for (int32_t s = 0; s < p.n_slots; ++s) {
      const int32_t rows = lora_start_[static_cast<size_t>(s) + 1] - lora_start_[static_cast<size_t>(s)];
      if (rows == 0) continue;
      for (int32_t r = 0; r < rows; r += kRowBlock) lora_tasks_.push_back({s, r, -1});
      work += int64_t{rows} * p.factors[s].rank * (p.in + p.out);
    }
    const size_t shrink_tasks = lora_tasks_.size();
    for (int32_t s = 0; s < p.n_slots; ++s) {
      if (lora_start_[static_cast<size_t>(s) + 1] == lora_start_[static_cast<size_t>(s)]) continue;
      for (int64_t o = 0; o < p.out; o += kOutChunk) lora_tasks_.push_back({s, 0, o});
    }
    auto run = [&](size_t i) {
      const LoraTask& task = lora_tasks_[i];
      const kernels::LoraFactors& f = p.factors[task.slot];
      const int32_t* rows = lora_rows_.data() + lora_start_[static_cast<size_t>(task.slot)];
      const int64_t n = lora_start_[static_cast<size_t>(task.slot) + 1] - lora_start_[static_cast<size_t>(task.slot)];
      if (task.out < 0) {
        kernels::cpu::lora_shrink(p, f, rows + task.row0, std::min<int64_t>(kRowBlock, n - task.row0), 0, f.rank);
      } else {
        kernels::cpu::lora_expand(p, f, rows, n, task.out, std::min(task.out + kOutChunk, p.out));
      }
    };
    const bool split = pool_.worth_splitting(work);
    for (const auto& phase : {std::pair{size_t{0}, shrink_tasks}, std::pair{shrink_tasks, lora_tasks_.size()}}) {
      const size_t begin = phase.first, end = phase.second;
      if (split) {
        pool_.parallel_for(static_cast<int64_t>(end - begin), [&](int64_t i) { run(begin + static_cast<size_t>(i)); });
      } else {
        for (size_t i = begin; i < end; ++i) run(i);
      }
    }
  }

  void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) override {
    if (reference_) {
      kernels::ref::sigmoid_gate_rows(x, gate, n, dim);
      return;
    }
    for_token_rows(n, dim, [&](int64_t t0, int64_t t1) {
      kernels::cpu::sigmoid_gate_rows(x + t0 * dim, gate + t0, t1 - t0, dim);
    });
  }

  void add(float* y, const float* x, int64_t n) override { kernels::cpu::add(y, x, n); }
  void scale(float* x, int64_t n, float s) override { kernels::cpu::scale(x, n, s); }
  void softcap(float* x, int64_t n, float cap) override { kernels::cpu::softcap(x, n, cap); }

  void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                    float* out) override {
    if (reference_) {
      Backend::add_rms_norm(x, delta, weight, n, dim, eps, out);
      return;
    }
    for_token_rows(n, dim, [&](int64_t t0, int64_t t1) {
      kernels::cpu::add_rms_norm(x + t0 * dim, delta + t0 * dim, weight, t1 - t0, dim, eps, out + t0 * dim);
    });
  }

  void add_bias(float* x, const float* bias, int64_t n, int64_t dim) override {
    kernels::cpu::add_bias(x, bias, n, dim);
  }

  void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) override {
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(out + i * dim, x + static_cast<int64_t>(rows[i]) * dim, static_cast<size_t>(dim) * sizeof(float));
    }
  }

  void permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) override {
    for_token_rows(n, cols, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const float* src = x + t * cols;
        float* dst = out + t * cols;
        for (int64_t j = 0; j < cols; ++j) dst[j] = src[perm[j]];
      }
    });
  }

 private:
  // Runs fn(t_begin, t_end) over the rows [0, n) of a row-independent op on [n, dim]
  // values, split across the pool when there is enough of it.
  template <typename Fn>
  void for_token_rows(int64_t n, int64_t dim, Fn&& fn) {
    if (n < 2 || !pool_.worth_splitting(n * dim * 16)) {
      fn(0, n);
      return;
    }
    const int64_t per_task = std::max<int64_t>(1, n / (pool_.size() * 4));
    pool_.parallel_for((n + per_task - 1) / per_task, [&](int64_t task) {
      fn(task * per_task, std::min(n, (task + 1) * per_task));
    });
  }

  // Runs fn(begin, end) over chunks of n independent values (any split gives the same
  // values), across the pool when there is enough work.
  template <typename Fn>
  void for_elements(int64_t n, Fn&& fn) {
    constexpr int64_t kChunk = 4096;
    if (!pool_.worth_splitting(n * 16)) {
      fn(0, n);
      return;
    }
    pool_.parallel_for((n + kChunk - 1) / kChunk, [&](int64_t c) {
      const int64_t b = c * kChunk;
      fn(b, std::min(n, b + kChunk));
    });
  }

  // LoRA's grouping of a step's rows by slot, and its tasks (a shrink of the slot's rows
  // from row0, or an expansion of its outputs from out), reused from step to step.
  struct LoraTask {
    int32_t slot;
    int32_t row0;  // a shrink's first row, in the slot's group
    int64_t out;   // an expansion's first output; -1: a shrink
  };
  std::vector<int32_t> lora_start_, lora_next_, lora_rows_;
  std::vector<LoraTask> lora_tasks_;
  bool reference_;
  ThreadPool pool_;
  std::vector<std::byte> scratch_;  // quantized activations; grows to the largest matmul once
  std::vector<int64_t> attention_tasks_;  // first task of each sequence; grows to the largest batch once
  std::vector<int32_t> attention_runs_;   // KV heads per task of each sequence
  std::vector<kernels::AttentionParams> attention_params_;  // one per sequence; the same
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace hearth
