// The GPU's figures, in one run of a few minutes, for bench/device_check.sh: the device's
// copy bandwidth; then per model shape and weight type, decode tok/s at each batch (the
// whole step: forward and device sampling, greedy) and prefill tok/s, each beside its
// model estimate (bytes a step reads over the copy bandwidth); kernel-level GB/s of each
// matrix-product path and of attention, split (flash-decoding) and not; and Q8_0/Q4_0
// and GPTQ int4 products on both their paths (weight streaming, tensor cores) at token
// counts around the choice between them.
//
// The weights are made in memory (seeded bytes, small values), never read from disk, so
// an 8B shape costs seconds: figures of speed, not of a model's output. On the emulated
// device (HEARTH_CUDA=EMU) it runs too, at the tiny shape, so CI keeps it working; its
// figures there mean nothing.
//
//   cuda_bench [--shapes 1b,8b] [--types f16,q4_0] [--batches 1,8,64] [--ctx 512]
//              [--steps 16] [--prefill 512] [--reps 20] [--device 0]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/args.h"
#include "common/half.h"
#include "common/log.h"
#include "common/model_config.h"
#include "common/tensor.h"
#include "engine/backends.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/ops.h"

namespace hearth {
namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

int fail(const Status& s) {
  std::fprintf(stderr, "cuda_bench: %s\n", s.to_string().c_str());
  return 1;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

struct Shape {
  const char* name;
  int32_t dim, hidden, layers, heads, kv_heads, vocab;
};

// Llama 3.2 1B and Llama 3.1 8B (what serving figures are usually quoted for), and a
// tiny one for the emulated device.
constexpr Shape kShapes[] = {{"tiny", 256, 768, 2, 4, 2, 512},
                             {"1b", 2048, 8192, 16, 32, 8, 128256},
                             {"8b", 4096, 14336, 32, 32, 8, 128256}};

ModelConfig shape_config(const Shape& s, int32_t context) {
  ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = s.vocab;
  c.dim = s.dim;
  c.hidden_dim = s.hidden;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = s.dim / s.heads;
  c.max_context = context;
  c.rope_theta = 500000.0f;
  return c;
}

// Seeded bytes for a tensor of `type`: fp16 values in [-0.03, 0.03] (read as bf16, the
// same bits are tiny values, which is as good for timing); Q8_0/Q4_0 blocks with random
// values and a small scale. One random 4 MiB pattern, repeated (speed, not
// statistics, is what the bytes are for).
class WeightBytes {
 public:
  WeightBytes() {
    pattern_f16_.resize(1 << 21);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (uint16_t& h : pattern_f16_) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      h = f32_to_fp16(static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) * 3e-5f);
    }
  }
  std::vector<std::byte> make(DType type, int64_t rows, int64_t cols) const {
    const size_t bytes = static_cast<size_t>(*dtype_bytes(type, rows * cols));
    std::vector<std::byte> out(bytes);
    const auto* src = reinterpret_cast<const std::byte*>(pattern_f16_.data());
    const size_t src_bytes = pattern_f16_.size() * 2;
    for (size_t at = 0; at < bytes; at += src_bytes) std::memcpy(out.data() + at, src, std::min(src_bytes, bytes - at));
    if (type == DType::kQ8_0 || type == DType::kQ4_0) {  // a sane scale in every block
      const size_t block = type == DType::kQ8_0 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
      const uint16_t d = f32_to_fp16(type == DType::kQ8_0 ? 2e-4f : 4e-3f);
      for (size_t at = 0; at + block <= bytes; at += block) std::memcpy(out.data() + at, &d, 2);
    }
    return out;
  }

 private:
  std::vector<uint16_t> pattern_f16_;
};

struct HostModel {
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorView> tensors;
  uint64_t step_bytes = 0;  // what a decode step reads of the weights (all but the embedding table)
  uint64_t head_bytes = 0;  // of which the LM head (run for the logit rows alone)

  void add(const std::string& name, DType type, int64_t rows, int64_t cols, std::vector<std::byte> bytes) {
    storage.push_back(std::move(bytes));
    TensorView t;
    t.name = name;
    t.dtype = type;
    t.n_dims = rows > 0 ? 2 : 1;
    t.shape = rows > 0 ? std::array<int64_t, 4>{rows, cols, 0, 0} : std::array<int64_t, 4>{cols, 0, 0, 0};
    t.data = storage.back().data();
    t.bytes = storage.back().size();
    tensors.push_back(t);
    if (name != "token_embd.weight") step_bytes += t.bytes;
    if (name == "output.weight") head_bytes = t.bytes;
  }
  void add_norm(const std::string& name, int64_t dim) {
    std::vector<std::byte> bytes(static_cast<size_t>(dim) * 4);
    const float one = 1.0f;
    for (int64_t i = 0; i < dim; ++i) std::memcpy(bytes.data() + 4 * i, &one, 4);
    add(name, DType::kF32, 0, dim, std::move(bytes));
  }
};

HostModel host_model(const ModelConfig& c, DType type, const WeightBytes& w) {
  HostModel m;
  const int64_t q = static_cast<int64_t>(c.n_heads) * c.head_dim, kv = static_cast<int64_t>(c.n_kv_heads) * c.head_dim;
  // The embedding table and LM head in the weight type too (as llama.cpp's quantizers
  // leave them at Q4_0's sibling Q6_K, a quantized head is the like-for-like case).
  m.add("token_embd.weight", type, c.vocab_size, c.dim, w.make(type, c.vocab_size, c.dim));
  m.add("output.weight", type, c.vocab_size, c.dim, w.make(type, c.vocab_size, c.dim));
  m.add_norm("output_norm.weight", c.dim);
  for (int32_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    m.add_norm(p + "attn_norm.weight", c.dim);
    m.add_norm(p + "ffn_norm.weight", c.dim);
    m.add(p + "attn_q.weight", type, q, c.dim, w.make(type, q, c.dim));
    m.add(p + "attn_k.weight", type, kv, c.dim, w.make(type, kv, c.dim));
    m.add(p + "attn_v.weight", type, kv, c.dim, w.make(type, kv, c.dim));
    m.add(p + "attn_output.weight", type, c.dim, q, w.make(type, c.dim, q));
    m.add(p + "ffn_gate.weight", type, c.hidden_dim, c.dim, w.make(type, c.hidden_dim, c.dim));
    m.add(p + "ffn_up.weight", type, c.hidden_dim, c.dim, w.make(type, c.hidden_dim, c.dim));
    m.add(p + "ffn_down.weight", type, c.dim, c.hidden_dim, w.make(type, c.dim, c.hidden_dim));
  }
  return m;
}

std::vector<std::string> name_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// "1,8,64": each in [1, 4096]; empty on anything else.
std::vector<int64_t> batch_list(const std::string& s) {
  std::vector<int64_t> out;
  for (const std::string& item : name_list(s)) {
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos) return {};
    const int64_t v = std::stoll(item);
    if (v < 1 || v > 4096) return {};
    out.push_back(v);
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Device-to-device copies of `bytes`, median GB/s counting the read and the write.
double copy_bandwidth(size_t bytes, int reps) {
  void *a = nullptr, *b = nullptr;
  check_cuda(cudaMalloc(&a, bytes), "allocating the copy's source");
  check_cuda(cudaMalloc(&b, bytes), "allocating the copy's destination");
  check_cuda(cudaMemset(a, 1, bytes), "filling the copy's source");
  std::vector<double> gbs;
  for (int r = 0; r < reps + 1; ++r) {
    const double t0 = now();
    check_cuda(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "copying");
    check_cuda(cudaDeviceSynchronize(), "copying");
    if (r > 0) gbs.push_back(2.0 * static_cast<double>(bytes) / (now() - t0) / 1e9);  // the first warms up
  }
  cudaFree(a);
  cudaFree(b);
  return median(gbs);
}

void row(const std::string& what, const std::string& figure, const std::string& estimate) {
  std::printf("| %s | %s | %s |\n", what.c_str(), figure.c_str(), estimate.c_str());
  std::fflush(stdout);
}

std::string fmt_num(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, v >= 100 ? "%.0f %s" : "%.2f %s", v, unit);
  return buf;
}

struct Run {
  int64_t ctx, steps, prefill, reps;
  std::vector<int64_t> batches;
  double copy_gbs;
};

// Decode and prefill of one shape and type through the engine's Model on the backend.
Status run_model(Backend& be, const Shape& shape, DType type, const Run& run, const WeightBytes& bytes) {
  const int64_t max_batch = *std::max_element(run.batches.begin(), run.batches.end());
  const int32_t context = static_cast<int32_t>(std::max(run.ctx + run.steps + 2, run.prefill + 2));
  const ModelConfig config = shape_config(shape, context);
  const double t0 = now();
  HostModel host = host_model(config, type, bytes);
  const int32_t max_tokens = static_cast<int32_t>(std::max<int64_t>(max_batch, run.prefill));
  HEARTH_ASSIGN_OR_RETURN(auto model, Model::create(config, host.tensors, be, max_tokens));
  host.storage = {};  // the device has its copy
  host.tensors = {};
  constexpr int32_t kBlock = 16;
  const int32_t blocks_per_seq = (context + kBlock - 1) / kBlock;
  HEARTH_ASSIGN_OR_RETURN(auto cache, KvCache::create(be, {config.n_layers, config.kv_dim(), kBlock,
                                                           static_cast<int32_t>(max_batch) * blocks_per_seq,
                                                           KvDType::kF16}));
  const std::string label = std::string(shape.name) + " " + std::string(dtype_name(type));
  row(label + ": weights made and bound", fmt_num(now() - t0, "s"),
      fmt_num(static_cast<double>(host.step_bytes) / 1e9, "GB read per decode step"));

  std::vector<KvSequence> seqs(static_cast<size_t>(max_batch));
  for (KvSequence& s : seqs) HEARTH_RETURN_IF_ERROR(kv_sequence_reserve(cache, s, context));
  const uint64_t kv_token_bytes = 2ull * static_cast<uint64_t>(config.n_layers) * config.kv_dim() * 2;  // f16 K and V

  // Each batch greedy, then the largest again sampling (temperature, top-k, top-p): the
  // device sampler's selections over the vocabulary.
  std::vector<std::pair<int64_t, bool>> decodes;
  for (const int64_t batch : run.batches) decodes.emplace_back(batch, false);
  decodes.emplace_back(max_batch, true);
  for (const auto& [batch, sampled] : decodes) {
    std::vector<SampleRow> rows(static_cast<size_t>(batch));
    for (size_t i = 0; i < rows.size(); ++i) {
      rows[i].sampling = sampled ? SamplingParams{.temperature = 0.8f, .top_p = 0.95f, .top_k = 50, .seed = i}
                                 : SamplingParams{.temperature = 0.0f};
      rows[i].draw = 0;
    }
    std::vector<SampledRow> out(static_cast<size_t>(batch));
    ModelInput in;
    std::vector<double> times;
    for (int64_t s = 0; s < run.steps + 1; ++s) {
      in.clear(kBlock);
      for (int64_t b = 0; b < batch; ++b) {
        const TokenId token = static_cast<TokenId>(1 + (b * 7919 + s) % (config.vocab_size - 1));
        HEARTH_RETURN_IF_ERROR(in.add_sequence(std::span(&token, 1), static_cast<int32_t>(run.ctx + s),
                                               seqs[static_cast<size_t>(b)].blocks, 1));
      }
      const double t = now();
      HEARTH_RETURN_IF_ERROR(model->forward_sampled(in, cache, rows, out));
      if (s > 0) times.push_back(now() - t);  // the first step warms up
    }
    const double step_s = median(times);
    const double bytes_per_step = static_cast<double>(host.step_bytes) +
                                  static_cast<double>(batch) * static_cast<double>(run.ctx) * kv_token_bytes;
    const double floor_s = bytes_per_step / (run.copy_gbs * 1e9);
    char est[160];
    std::snprintf(est, sizeof est, "%.2f ms/step, %.0f tok/s at the copy bandwidth; reached %.0f%% of it",
                  floor_s * 1e3, static_cast<double>(batch) / floor_s, 100.0 * floor_s / step_s);
    row(label + ": decode, batch " + std::to_string(batch) + ", context " + std::to_string(run.ctx) +
            (sampled ? ", sampled (temperature 0.8, top-k 50, top-p 0.95)" : ", greedy"),
        fmt_num(static_cast<double>(batch) / step_s, "tok/s") + " (" + fmt_num(step_s * 1e3, "ms/step") + ")", est);
  }

  if (run.prefill > 0) {
    std::vector<TokenId> prompt(static_cast<size_t>(run.prefill));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<TokenId>(1 + (i * 7919) % (config.vocab_size - 1));
    std::vector<SampleRow> rows(1);
    rows[0].sampling.temperature = 0.0f;
    std::vector<SampledRow> out(1);
    ModelInput in;
    std::vector<double> times;
    for (int r = 0; r < 4; ++r) {
      in.clear(kBlock);
      HEARTH_RETURN_IF_ERROR(in.add_sequence(prompt, 0, seqs[0].blocks, 1));
      const double t = now();
      HEARTH_RETURN_IF_ERROR(model->forward_sampled(in, cache, rows, out));
      if (r > 0) times.push_back(now() - t);
    }
    const double s = median(times);
    // 2 flops per weight per token in the layers' products, and the LM head's for the
    // one row whose logits are wanted (attention aside).
    const double bytes_per_param = static_cast<double>(dtype_block_bytes(type)) / dtype_block_elems(type);
    const double layer_params = static_cast<double>(host.step_bytes - host.head_bytes) / bytes_per_param;
    const double flops = 2.0 * (layer_params * static_cast<double>(run.prefill) +
                                static_cast<double>(host.head_bytes) / bytes_per_param);
    char est[128];
    std::snprintf(est, sizeof est, "%.1f TFLOP/s in the matrix products", flops / s / 1e12);
    row(label + ": prefill of " + std::to_string(run.prefill) + " tokens",
        fmt_num(static_cast<double>(run.prefill) / s, "tok/s") + " (" + fmt_num(s * 1e3, "ms") + ")", est);
  }
  for (KvSequence& s : seqs) kv_sequence_release(cache, s);
  return Status::ok();
}

// One matrix product path alone: [rows, cols] of `type` at n tokens, GB/s of its weights.
Status run_matmul(Backend& be, DType type, int64_t rows, int64_t cols, int64_t n, int reps, const WeightBytes& bytes,
                  int32_t sm_count) {
  HostModel host;
  host.add("w", type, rows, cols, bytes.make(type, rows, cols));
  const uint64_t w_bytes = host.tensors[0].bytes;
  HEARTH_ASSIGN_OR_RETURN(auto bound, be.bind_weights(host.tensors, kLayoutPlain));
  const TensorView& dev = bound->tensors()[0];
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer x, be.alloc(static_cast<size_t>(n * cols) * 4));
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer y, be.alloc(static_cast<size_t>(n * rows) * 4));
  std::vector<float> xs(static_cast<size_t>(n * cols), 0.01f);
  be.write(x, 0, xs.data(), xs.size() * 4);
  be.matmul(dev, x.f32(), n, y.f32());
  be.synchronize();
  const double t0 = now();
  for (int r = 0; r < reps; ++r) be.matmul(dev, x.f32(), n, y.f32());
  be.synchronize();
  const double s = (now() - t0) / reps;
  char what[160];
  // As the backend and kernels::cuda::matmul choose.
  const bool cublas = (type == DType::kF16 || type == DType::kBF16) && n >= 8;
  const bool mma = (type == DType::kQ8_0 || type == DType::kQ4_0) && n >= kernels::cuda::kQuantMmaMinTokens;
  const int32_t splits = cublas || mma ? 1 : kernels::cuda::matvec_splits(rows, n, cols, sm_count);
  char path[64];
  std::snprintf(path, sizeof path, splits > 1 ? "hearth's streaming kernel, %d column ranges" : "hearth's streaming kernel",
                splits);
  std::snprintf(what, sizeof what, "matmul %s [%lld, %lld] x %lld tokens (%s)", std::string(dtype_name(type)).c_str(),
                static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(n),
                cublas ? "cuBLASLt" : mma ? "hearth's int8 mma" : path);
  row(what, fmt_num(static_cast<double>(w_bytes) / s / 1e9, "GB/s of weights") + " (" + fmt_num(s * 1e6, "us") + ")",
      fmt_num(2.0 * static_cast<double>(rows * cols * n) / s / 1e12, "TFLOP/s"));
  return Status::ok();
}

// The token counts at which a product's two paths are timed side by side.
constexpr int64_t kPathTokens[] = {8, 16, 32, 64, 512};

// One product at n tokens on its streaming and its tensor-core path (`launch` enqueues it
// once on a path), microseconds a call each, printed as a row under `what`; `min_tokens`
// is where the backend switches to tensor cores.
Status time_paths(Backend& be, int reps, const std::string& what, int64_t n, int64_t min_tokens,
                  const std::function<cudaError_t(kernels::cuda::MatmulPath)>& launch) {
  using kernels::cuda::MatmulPath;
  double us[2] = {0, 0};
  for (const MatmulPath path : {MatmulPath::kStreaming, MatmulPath::kTensorCores}) {
    if (const cudaError_t e = launch(path); e != cudaSuccess) {
      return make_error(ErrorCode::kInternal, "{} on the {} path: {}", what,
                        path == MatmulPath::kStreaming ? "streaming" : "tensor-core", cudaGetErrorString(e));
    }
    be.synchronize();
    const double t0 = now();
    for (int r = 0; r < reps; ++r) (void)launch(path);
    be.synchronize();
    us[path == MatmulPath::kStreaming ? 0 : 1] = (now() - t0) / reps * 1e6;
  }
  char tail[96];
  std::snprintf(tail, sizeof tail, "mma %.2fx; the backend takes %s", us[0] / us[1],
                n >= min_tokens ? "mma" : "streaming");
  row(what, fmt_num(us[0], "us") + " / " + fmt_num(us[1], "us"), tail);
  return Status::ok();
}

// A Q8_0/Q4_0 product on each of its two paths, weight streaming and int8 tensor cores,
// at token counts around the choice between them (kQuantMmaMinTokens), so that a device's
// run shows where the crossover is.
Status run_quant_paths(Backend& be, DType type, int64_t rows, int64_t cols, int reps, const WeightBytes& bytes) {
  using kernels::cuda::MatmulPath;
  HostModel host;
  host.add("w", type, rows, cols, bytes.make(type, rows, cols));
  HEARTH_ASSIGN_OR_RETURN(auto bound, be.bind_weights(host.tensors, kLayoutPlain));
  const TensorView& dev = bound->tensors()[0];
  const auto stream = static_cast<cudaStream_t>(be.queue().handle);
  for (const int64_t n : kPathTokens) {
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer x, be.alloc(static_cast<size_t>(n * cols) * 4));
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer y, be.alloc(static_cast<size_t>(n * rows) * 4));
    const size_t scratch_bytes = kernels::cuda::matmul_scratch_bytes(type, n, cols);
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer scratch, be.alloc(scratch_bytes));
    std::vector<float> xs(static_cast<size_t>(n * cols), 0.01f);
    be.write(x, 0, xs.data(), xs.size() * 4);
    const std::string what = fmt::format("{} [{}, {}] x {} tokens: streaming / int8 mma", dtype_name(type), rows,
                                         cols, n);
    HEARTH_RETURN_IF_ERROR(time_paths(be, reps, what, n, kernels::cuda::kQuantMmaMinTokens, [&](MatmulPath path) {
      const kernels::cuda::MatmulParams p{.type = type, .w = dev.data, .rows = rows, .cols = cols, .x = x.f32(),
                                          .n_tokens = n, .y = y.f32(), .scratch = scratch.data(),
                                          .scratch_bytes = scratch_bytes, .path = path};
      return kernels::cuda::matmul(p, stream);
    }));
  }
  return Status::ok();
}

// A 4-bit group-quantized (GPTQ-layout, groups of 128, no act-order) product on each of
// its two paths, weight streaming and f16 tensor cores, at the same token counts.
Status run_group_quant_paths(Backend& be, int64_t rows, int64_t cols, int reps) {
  using kernels::cuda::MatmulPath;
  constexpr int32_t kBits = 4, kGroup = 128, kPack = 32 / kBits;
  const int64_t groups = cols / kGroup;
  std::vector<int32_t> qweight(static_cast<size_t>(cols / kPack * rows)), qzeros(static_cast<size_t>(groups * rows / kPack));
  std::vector<uint16_t> scales(static_cast<size_t>(groups * rows), f32_to_fp16(2e-3f));
  uint64_t bits = 0x2545F4914F6CDD1Dull;
  for (int32_t& w : qweight) {
    bits ^= bits << 13, bits ^= bits >> 7, bits ^= bits << 17;
    w = static_cast<int32_t>(bits);
  }
  for (int32_t& z : qzeros) z = static_cast<int32_t>(0x77777777u);
  auto upload = [&](const void* src, size_t bytes) -> Result<BackendBuffer> {
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer b, be.alloc(bytes));
    be.write(b, 0, src, bytes);
    return b;
  };
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer qw, upload(qweight.data(), qweight.size() * 4));
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer qz, upload(qzeros.data(), qzeros.size() * 4));
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer sc, upload(scales.data(), scales.size() * 2));
  kernels::dev::GroupQuantView w;
  w.qweight = static_cast<const int32_t*>(qw.data());
  w.qzeros = static_cast<const int32_t*>(qz.data());
  w.scales = static_cast<const uint16_t*>(sc.data());
  w.rows = rows;
  w.cols = cols;
  w.bits = kBits;
  w.group_size = kGroup;
  const auto stream = static_cast<cudaStream_t>(be.queue().handle);
  for (const int64_t n : kPathTokens) {
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer x, be.alloc(static_cast<size_t>(n * cols) * 4));
    HEARTH_ASSIGN_OR_RETURN(BackendBuffer y, be.alloc(static_cast<size_t>(n * rows) * 4));
    std::vector<float> xs(static_cast<size_t>(n * cols), 0.01f);
    be.write(x, 0, xs.data(), xs.size() * 4);
    const std::string what = fmt::format("gptq int4 g128 [{}, {}] x {} tokens: streaming / f16 mma", rows, cols, n);
    HEARTH_RETURN_IF_ERROR(time_paths(be, reps, what, n, kernels::cuda::kGroupQuantMmaMinTokens, [&](MatmulPath path) {
      return kernels::cuda::matmul_group_quant(w, x.f32(), n, y.f32(), stream, path);
    }));
  }
  return Status::ok();
}

// Attention alone over an f16 cache: n sequences decoding at context ctx, split as the
// backend splits it and in one range; GB/s of the KV read.
Status run_attention(Backend& be, int32_t sm_count, int64_t n, int32_t ctx, int reps) {
  constexpr int32_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kBlock = 16;
  const int32_t blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const size_t cache_bytes = static_cast<size_t>(n * blocks_per_seq) * kBlock * kKvHeads * kHeadDim * 2;
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer k, be.alloc(cache_bytes));
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer v, be.alloc(cache_bytes));
  auto* stream = static_cast<cudaStream_t>(be.queue().handle);
  check_cuda(cudaMemsetAsync(k.data(), 0, cache_bytes, stream), "clearing K");
  check_cuda(cudaMemsetAsync(v.data(), 0, cache_bytes, stream), "clearing V");
  ModelInput in;
  in.clear(kBlock);
  std::vector<int32_t> table(static_cast<size_t>(blocks_per_seq));
  for (int64_t s = 0; s < n; ++s) {
    for (int32_t b = 0; b < blocks_per_seq; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(s) * blocks_per_seq + b;
    const TokenId token = 1;
    HEARTH_RETURN_IF_ERROR(in.add_sequence(std::span(&token, 1), ctx - 1, table, 1));
  }
  const StepInput st = be.upload(in);
  const size_t q_floats = static_cast<size_t>(n) * kHeads * kHeadDim;
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer q, be.alloc(q_floats * 4));
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer out, be.alloc(q_floats * 4));
  std::vector<float> qs(q_floats, 0.01f);
  be.write(q, 0, qs.data(), qs.size() * 4);
  const kernels::AttentionStep p{.q = q.f32(), .out = out.f32(), .k_cache = k.data(), .v_cache = v.data(),
                                 .positions = st.positions, .query_start = st.query_start,
                                 .page_start = st.page_start, .pages = st.pages, .n_tokens = st.n_tokens,
                                 .n_seqs = st.n_seqs, .block_size = kBlock, .n_heads = kHeads,
                                 .n_kv_heads = kKvHeads, .head_dim = kHeadDim, .scale = 0.088f,
                                 .kv_dtype = KvDType::kF16, .max_keys = st.max_keys};
  const int32_t splits = kernels::cuda::attention_splits(p.n_tokens, kHeads, p.max_keys, sm_count);
  HEARTH_ASSIGN_OR_RETURN(BackendBuffer scratch,
                          be.alloc(kernels::cuda::attention_scratch_bytes(p.n_tokens, kHeads, kHeadDim, 64)));
  for (const int32_t ways : {splits, 1}) {
    const kernels::cuda::AttentionSplit split{.splits = ways, .scratch = scratch.f32(),
                                              .scratch_bytes = scratch.bytes()};
    check_cuda(kernels::cuda::attention(p, split, stream), "attention");
    be.synchronize();
    const double t0 = now();
    for (int r = 0; r < reps; ++r) check_cuda(kernels::cuda::attention(p, split, stream), "attention");
    be.synchronize();
    const double s = (now() - t0) / reps;
    const double kv = 2.0 * static_cast<double>(n) * ctx * kKvHeads * kHeadDim * 2;
    row("attention, " + std::to_string(n) + " x 1 query at context " + std::to_string(ctx) + ", f16 KV, " +
            std::to_string(ways) + (ways == 1 ? " range" : " ranges") + (ways == splits ? " (the backend's)" : ""),
        fmt_num(kv / s / 1e9, "GB/s of KV") + " (" + fmt_num(s * 1e6, "us") + ")", "-");
    if (splits == 1) break;
  }
  return Status::ok();
}

int main_impl(int argc, char** argv) {
  if (const Status s = log_init("cuda_bench", LogLevel::kWarn); !s.is_ok()) return fail(s);
  std::vector<std::string> argv_strings(argv + 1, argv + argc);
  auto args = Args::parse(argv_strings,
                          {"shapes", "types", "batches", "ctx", "steps", "prefill", "reps", "device", "copy-mib"}, {});
  if (!args.is_ok()) return fail(args.status());
  Run run;
  const auto ctx = args->get_int("ctx", 1, 1 << 20);
  const auto steps = args->get_int("steps", 1, 10000);
  const auto prefill = args->get_int("prefill", 0, 1 << 16);
  const auto reps = args->get_int("reps", 1, 100000);
  const auto device = args->get_int("device", 0, 63);
  const auto copy_mib = args->get_int("copy-mib", 1, 1 << 16);
  for (const auto* r : {&ctx, &steps, &prefill, &reps, &device, &copy_mib}) {
    if (!r->is_ok()) return fail(r->status());
  }
  run.ctx = ctx->value_or(512);
  run.steps = steps->value_or(16);
  run.prefill = prefill->value_or(512);
  run.reps = reps->value_or(20);
  run.batches = batch_list(args->get("batches").value_or("1,8,64"));
  if (run.batches.empty()) {
    return fail(make_error(ErrorCode::kInvalidArgument, "--batches takes a list of 1..4096 such as 1,8,64"));
  }
  const std::vector<std::string> shapes = name_list(args->get("shapes").value_or("1b,8b"));
  const std::vector<std::string> types = name_list(args->get("types").value_or("f16,q4_0"));

  auto backend = make_backend("cuda:" + std::to_string(device->value_or(0)));
  if (!backend.is_ok()) return fail(backend.status());
  auto& be = *backend;
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, static_cast<int>(device->value_or(0))), "reading the device");
  std::printf("| %s (sm_%d%d, %d SMs) | figure | model estimate |\n| --- | --- | --- |\n", prop.name, prop.major,
              prop.minor, prop.multiProcessorCount);
  run.copy_gbs = copy_bandwidth(static_cast<size_t>(copy_mib->value_or(1024)) << 20, 5);
  row("device-to-device copy", fmt_num(run.copy_gbs, "GB/s (read + write)"), "the bandwidth the estimates use");

  const WeightBytes bytes;
  for (const std::string& shape_name : shapes) {
    const Shape* shape = nullptr;
    for (const Shape& s : kShapes) shape = shape_name == s.name ? &s : shape;
    if (shape == nullptr) return fail(make_error(ErrorCode::kInvalidArgument, "no shape '{}' (tiny, 1b, 8b)", shape_name));
    for (const std::string& type_name : types) {
      const std::optional<DType> type = dtype_from_name(type_name);
      if (!type || (*type != DType::kF16 && *type != DType::kBF16 && *type != DType::kQ8_0 && *type != DType::kQ4_0)) {
        return fail(make_error(ErrorCode::kInvalidArgument, "no weight type '{}' (f16, bf16, q8_0, q4_0)", type_name));
      }
      if (const Status s = run_model(*be, *shape, *type, run, bytes); !s.is_ok()) return fail(s);
    }
  }
  // Each product path on the 8B shape's FFN down projection (the tiny shape's when that is
  // the only one asked for), at the batches asked for.
  const bool tiny = shapes.size() == 1 && shapes[0] == "tiny";
  const int64_t rows = tiny ? 256 : 4096, cols = tiny ? 768 : 14336;
  for (const DType type : {DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    for (const int64_t n : run.batches) {
      if (const Status s = run_matmul(*be, type, rows, cols, n, static_cast<int>(run.reps), bytes,
                                      prop.multiProcessorCount);
          !s.is_ok()) {
        return fail(s);
      }
    }
    // A short matrix (the 8B shape's K/V projection, the tiny shape's Q) at batch 1, where
    // the rows are too few to fill the device and the streaming kernel splits the columns.
    const int64_t short_rows = tiny ? 64 : 1024, short_cols = tiny ? 2048 : 4096;
    if (const Status s = run_matmul(*be, type, short_rows, short_cols, 1, static_cast<int>(run.reps), bytes,
                                    prop.multiProcessorCount);
        !s.is_ok()) {
      return fail(s);
    }
  }
  for (const DType type : {DType::kQ8_0, DType::kQ4_0}) {
    if (const Status s = run_quant_paths(*be, type, rows, cols, static_cast<int>(run.reps), bytes); !s.is_ok()) {
      return fail(s);
    }
  }
  if (const Status s = run_group_quant_paths(*be, rows, cols, static_cast<int>(run.reps)); !s.is_ok()) {
    return fail(s);
  }
  for (const int64_t n : {int64_t{1}, int64_t{16}}) {
    const int32_t attn_ctx = tiny ? 1100 : 8192;
    if (const Status s = run_attention(*be, prop.multiProcessorCount, n, attn_ctx, static_cast<int>(run.reps));
        !s.is_ok()) {
      return fail(s);
    }
  }
  std::printf("| CUDA graphs | not built yet: every step launches its kernels | - |\n");
  return 0;
}

}  // namespace
}  // namespace hearth

int main(int argc, char** argv) { return hearth::main_impl(argc, argv); }
