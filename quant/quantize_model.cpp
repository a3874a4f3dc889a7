#include "quant/quantize_model.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <unordered_map>

#include "common/half.h"
#include "common/json.h"
#include "common/mapped_file.h"
#include "common/model_tensors.h"
#include "engine/core/backend.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/thread_pool.h"
#include "kernels/reference/reference.h"
#include "loader/gguf_export.h"
#include "loader/prequantized.h"
#include "loader/safetensors_writer.h"

namespace hearth::quant {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The matrices of layer `l` that quantization rounds, grouped by the input they read
// (each group's first matrix is the one whose input the calibration observes): q/k/v,
// the attention output, gate and up (up alone when ungated: GPT-J, GPT-NeoX), down;
// with experts, each expert's gate/up and down, and the shared expert's, in place of the
// dense FFN's (a mixture's leading dense layers keep theirs). An expert's input is the
// rows of the tokens routed to it. The router, its bias and the shared expert's gate (a
// few rows each) stay as they are.
std::vector<std::vector<std::string>> linear_groups(const ModelConfig& c, int32_t l) {
  const std::string p = fmt::format("blk.{}.", l);
  std::vector<std::vector<std::string>> groups = {
      {p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, {p + "attn_output.weight"}};
  auto ffn = [&](const std::string& gate, const std::string& up, const std::string& down) {
    groups.push_back(c.gated_ffn ? std::vector<std::string>{gate, up} : std::vector<std::string>{up});
    groups.push_back({down});
  };
  if (!c.expert_layer(l)) {
    ffn(p + "ffn_gate.weight", p + "ffn_up.weight", p + "ffn_down.weight");
    return groups;
  }
  for (int e = 0; e < c.n_experts; ++e) {
    ffn(fmt::format("{}ffn_gate.{}.weight", p, e), fmt::format("{}ffn_up.{}.weight", p, e),
        fmt::format("{}ffn_down.{}.weight", p, e));
  }
  if (c.shared_expert_dim > 0) ffn(p + "ffn_gate_shexp.weight", p + "ffn_up_shexp.weight", p + "ffn_down_shexp.weight");
  return groups;
}

// A CPU backend that shows every matmul's input to an observer before running it: how
// the calibration pass sees what each linear layer reads, through the engine's own
// forward pass.
class ObservedBackend final : public Backend {
 public:
  using Observer = std::function<void(const TensorView& w, const float* x, int64_t n)>;
  ObservedBackend(std::unique_ptr<Backend> inner, Observer observer)
      : inner_(std::move(inner)), observer_(std::move(observer)) {}

  void observe(bool on) { on_ = on; }

  std::string_view name() const override { return inner_->name(); }
  int threads() const override { return inner_->threads(); }
  bool supports(BackendOp op, DType type) const override { return inner_->supports(op, type); }
  Result<std::unique_ptr<BoundWeights>> bind_weights(std::span<const TensorView> tensors,
                                                     std::string_view layout) override {
    return inner_->bind_weights(tensors, layout);
  }
  StepInput upload(const ModelInput& input) override { return inner_->upload(input); }
  Result<BackendBuffer> alloc(size_t bytes) override { return inner_->alloc(bytes); }
  void write(const BackendBuffer& dst, size_t offset, const void* src, size_t bytes) override {
    inner_->write(dst, offset, src, bytes);
  }
  void read(const BackendBuffer& src, size_t offset, void* dst, size_t bytes) override {
    inner_->read(src, offset, dst, bytes);
  }
  void embedding(const TensorView& table, const TokenId* ids, int64_t n, float* out) override {
    inner_->embedding(table, ids, n, out);
  }
  void matmul(const TensorView& w, const float* x, int64_t n, float* y) override {
    if (on_) observer_(w, x, n);
    inner_->matmul(w, x, n, y);
  }
  void matmuls(const float* x, int64_t n, std::span<const MatmulTarget> targets) override {
    if (on_) {
      for (const MatmulTarget& t : targets) observer_(*t.w, x, n);
    }
    inner_->matmuls(x, n, targets);
  }
  void rms_norm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) override {
    inner_->rms_norm(x, weight, n, dim, eps, out);
  }
  void layer_norm(const float* x, const float* weight, const float* bias, int64_t n, int64_t dim, float eps,
                  float* out) override {
    inner_->layer_norm(x, weight, bias, n, dim, eps, out);
  }
  void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, int64_t rotary_dim, const int32_t* positions,
            const float* inv_freq, RopeStyle style) override {
    inner_->rope(x, n, n_heads, head_dim, rotary_dim, positions, inv_freq, style);
  }
  void kv_store(const kernels::KvStoreParams& p) override { inner_->kv_store(p); }
  void attention(const kernels::AttentionStep& p) override { inner_->attention(p); }
  void swiglu(const float* gate, const float* up, int64_t n, float* out) override { inner_->swiglu(gate, up, n, out); }
  void gelu(const float* x, const float* up, int64_t n, bool tanh_form, float* out) override {
    inner_->gelu(x, up, n, tanh_form, out);
  }
  void add(float* y, const float* x, int64_t n) override { inner_->add(y, x, n); }
  void scale(float* x, int64_t n, float s) override { inner_->scale(x, n, s); }
  void softcap(float* x, int64_t n, float cap) override { inner_->softcap(x, n, cap); }
  void lora(const kernels::LoraProduct& p) override { inner_->lora(p); }
  void sigmoid_gate_rows(float* x, const float* gate, int64_t n, int64_t dim) override {
    inner_->sigmoid_gate_rows(x, gate, n, dim);
  }
  void add_rms_norm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim, float eps,
                    float* out) override {
    inner_->add_rms_norm(x, delta, weight, n, dim, eps, out);
  }
  void add_bias(float* x, const float* bias, int64_t n, int64_t dim) override { inner_->add_bias(x, bias, n, dim); }
  void gather_rows(const float* x, const int32_t* rows, int64_t n, int64_t dim, float* out) override {
    inner_->gather_rows(x, rows, n, dim, out);
  }
  void permute_columns(const float* x, int64_t n, int64_t cols, const int32_t* perm, float* out) override {
    inner_->permute_columns(x, n, cols, perm, out);
  }
  void moe_route(const float* logits, int64_t n, const kernels::MoeRouting& r, int32_t* ids,
                 float* weights) override {
    inner_->moe_route(logits, n, r, ids, weights);
  }
  void moe_combine(const float* rows, const int32_t* pos, const float* weights, int64_t n, int32_t k, int64_t dim,
                   float* out) override {
    inner_->moe_combine(rows, pos, weights, n, k, dim, out);
  }

 private:
  std::unique_ptr<Backend> inner_;
  Observer observer_;
  bool on_ = false;
};

// Why `t` cannot be quantized with these options (nullopt: it can): a group size that
// does not divide its inputs, or outputs that are not whole packed words (HF GPTQ).
std::optional<std::string> unfit_reason(const TensorView& t, const ModelQuantOptions& o) {
  if (t.cols() % o.scheme.group_size != 0) {
    return fmt::format("{} inputs are not whole groups of {}", t.cols(), o.scheme.group_size);
  }
  const int64_t pack = 32 / o.scheme.bits;
  if (o.output == OutputFormat::kHfGptq && t.rows() % pack != 0) {
    return fmt::format("{} outputs are not whole packed words of {}", t.rows(), pack);
  }
  return std::nullopt;
}

// The matrix as blocks of 32 values of the columns `order` lists: each block's d is its
// group's scale, `fill` sets its values from the 32 codes.
template <typename Block, typename Fill>
std::vector<std::byte> blocks_of(const QuantizedMatrix& m, const std::vector<int32_t>& order, Fill&& fill) {
  const int64_t blocks = m.cols / 32;
  std::vector<std::byte> bytes(static_cast<size_t>(m.rows * blocks) * sizeof(Block));
  auto* out = reinterpret_cast<Block*>(bytes.data());
  uint8_t codes[32];
  for (int64_t r = 0; r < m.rows; ++r) {
    const uint8_t* row = &m.q[static_cast<size_t>(r * m.cols)];
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t* cols = &order[static_cast<size_t>(b * 32)];
      Block& blk = out[r * blocks + b];
      blk.d = m.scales[static_cast<size_t>(m.g_idx[static_cast<size_t>(cols[0])] * m.rows + r)];
      for (int j = 0; j < 32; ++j) codes[j] = row[cols[j]];
      fill(blk, codes);
    }
  }
  return bytes;
}

}  // namespace

std::string_view method_name(Method method) { return method == Method::kGptq ? "gptq" : "rtn"; }

Result<std::vector<std::vector<TokenId>>> calibration_samples(const Tokenizer& tokenizer, std::string_view text,
                                                              bool json_lines, int32_t samples, int32_t seq_len) {
  if (samples < 1 || seq_len < 2) {
    return make_error(ErrorCode::kInvalidArgument, "--samples must be at least 1 and --seq-len at least 2");
  }
  const TokenId bos = tokenizer.bos_id();
  std::vector<std::vector<TokenId>> out;
  auto window_from = [&](std::span<const TokenId> ids) {
    std::vector<TokenId> w;
    if (bos >= 0) w.push_back(bos);
    for (TokenId id : ids) {
      if (static_cast<int32_t>(w.size()) == seq_len) break;
      if (id != bos) w.push_back(id);
    }
    return w;
  };
  int64_t have = 0;  // tokens found, for the message
  if (json_lines) {
    size_t line_no = 0;
    for (size_t pos = 0; pos < text.size() && static_cast<int32_t>(out.size()) < samples;) {
      const size_t end = std::min(text.find('\n', pos), text.size());
      const std::string_view line = text.substr(pos, end - pos);
      pos = end + 1;
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      auto doc = json_parse(line, "a calibration line");
      std::optional<std::string> text_field;
      if (doc.is_ok() && doc->is_object()) {
        auto field = json_opt_string(doc->as_object(), "text");
        if (field.is_ok()) text_field = *field;
      }
      if (!text_field) {
        return make_error(ErrorCode::kInvalidArgument, "calibration line {}: expected a JSON object with a \"text\" string",
                          line_no);
      }
      auto ids = tokenizer.encode(*text_field, {false, false});
      if (!ids.is_ok()) return ids.status().with_context(fmt::format("calibration line {}", line_no));
      have += static_cast<int64_t>(ids->size());
      std::vector<TokenId> w = window_from(*ids);
      if (static_cast<int32_t>(w.size()) == seq_len) out.push_back(std::move(w));
    }
    if (static_cast<int32_t>(out.size()) < samples) {
      return make_error(ErrorCode::kInvalidArgument,
                        "the calibration file has {} lines of at least {} tokens ({} tokens in all), --samples asks "
                        "for {}: give more text or lower --samples / --seq-len",
                        out.size(), seq_len, have, samples);
    }
    return out;
  }
  auto ids = tokenizer.encode(text, {false, false});
  if (!ids.is_ok()) return ids.status().with_context("calibration text");
  const int32_t body = bos >= 0 ? seq_len - 1 : seq_len;
  const int64_t windows = static_cast<int64_t>(ids->size()) / body;
  if (windows < samples) {
    return make_error(ErrorCode::kInvalidArgument,
                      "the calibration text has {} tokens, enough for {} windows of {}; --samples {} needs {}: give "
                      "more text or lower --samples / --seq-len",
                      ids->size(), windows, seq_len, samples, static_cast<int64_t>(samples) * body);
  }
  for (int32_t s = 0; s < samples; ++s) {
    std::vector<TokenId> w;
    if (bos >= 0) w.push_back(bos);
    w.insert(w.end(), ids->begin() + static_cast<ptrdiff_t>(s) * body, ids->begin() + static_cast<ptrdiff_t>(s + 1) * body);
    out.push_back(std::move(w));
  }
  return out;
}

Status quantize_check(const LoadedModel& model, const ModelQuantOptions& o) {
  HEARTH_RETURN_IF_ERROR(scheme_check(o.scheme));
  if (o.method == Method::kRtn && o.scheme.act_order) {
    return make_error(ErrorCode::kInvalidArgument, "--act-order needs --method gptq");
  }
  if (o.output == OutputFormat::kGguf) {
    if (model.tokenizer.kind != TokenizerSource::Kind::kGguf) {
      return make_error(ErrorCode::kUnsupported,
                        "a GGUF file carries a GGUF vocabulary, which this {} model has none of: quantize its GGUF "
                        "file, or write a Hugging Face GPTQ directory (--out DIR)",
                        model_format_name(model.format));
    }
    if (!o.scheme.sym) {
      return make_error(ErrorCode::kUnsupported,
                        "--asym cannot be written to GGUF (its Q4_0 / Q8_0 blocks are symmetric): use --sym, or "
                        "write a Hugging Face GPTQ directory (--out DIR)");
    }
  }
  if (o.output == OutputFormat::kGguf && model.config.n_experts == 0) {
    // Before any calibration: a family gguf_export cannot write fails now, not after it.
    if (Status st = gguf_export_check(model.config.architecture); !st.is_ok()) {
      return make_error(ErrorCode::kUnsupported, "{}: quantize its Hugging Face checkpoint into a GPTQ directory "
                        "(--out DIR) instead", st.message());
    }
  }
  if (model.config.n_experts > 0 && o.output == OutputFormat::kGguf) {
    return make_error(ErrorCode::kUnsupported,
                      "a GGUF of a mixture of experts would need each layer's experts merged into llama.cpp's "
                      "[experts, rows, cols] tensors, which is not implemented: write a Hugging Face GPTQ directory "
                      "(--out DIR), or serve its GGUF as Q8_0 or Q4_0");
  }
  if (model.config.n_experts > 0 && o.scheme.act_order) {
    return make_error(ErrorCode::kUnsupported,
                      "--act-order on a mixture of experts is not implemented (its experts' column orders have no "
                      "place in the weights): quantize without it");
  }
  if (o.output == OutputFormat::kHfGptq && model.config.architecture == "gptneox") {
    return make_error(ErrorCode::kUnsupported,
                      "a Hugging Face GPTQ directory of GPT-NeoX would need its fused query_key_value rebuilt, which "
                      "is not implemented: give --out FILE.gguf");
  }
  if (o.output == OutputFormat::kHfGptq && model.format != ModelFormat::kSafetensors) {
    return make_error(ErrorCode::kUnsupported,
                      "a Hugging Face GPTQ directory is written from a Hugging Face model directory (its tokenizer "
                      "and config are copied), not from a {} file: give --out FILE.gguf",
                      model_format_name(model.format));
  }
  for (const TensorView& t : model.tensors) {
    if (t.name.ends_with(".perm")) {
      return make_error(ErrorCode::kUnsupported,
                        "the model is an act-order quantized checkpoint ({} is a permuted column order): quantize the "
                        "unquantized model it was made from",
                        t.name);
    }
  }
  std::vector<std::string> unfit;
  for (int32_t l = 0; l < model.config.n_layers; ++l) {
    for (const std::vector<std::string>& group : linear_groups(model.config, l)) {
      for (const std::string& name : group) {
        const TensorView* t = model.find(name);
        if (t == nullptr) return make_error(ErrorCode::kFormat, "the model has no {}", name);
        if (const std::optional<std::string> why = unfit_reason(*t, o)) {
          unfit.push_back(fmt::format("{} ({})", t->name, *why));
        }
      }
    }
  }
  if (!unfit.empty() && !o.skip_indivisible) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} matrices cannot be quantized as asked, e.g. {}: choose a group size that fits, or add "
                      "--skip-indivisible to keep them unquantized",
                      unfit.size(), unfit.front());
  }
  return Status::ok();
}

Result<QuantizedModel> quantize_model(const LoadedModel& model, std::span<const std::vector<TokenId>> calibration,
                                      const ModelQuantOptions& o, const LayerProgress& progress) {
  HEARTH_RETURN_IF_ERROR(quantize_check(model, o));
  const auto t0 = std::chrono::steady_clock::now();
  const ModelConfig& c = model.config;
  ThreadPool pool(o.threads);
  QuantizedModel out;

  auto divisible = [&](const TensorView& t) { return !unfit_reason(t, o).has_value(); };
  if (o.method == Method::kRtn) {
    for (int32_t l = 0; l < c.n_layers; ++l) {
      const auto tl = std::chrono::steady_clock::now();
      for (const std::vector<std::string>& group : linear_groups(c, l)) {
        for (const std::string& name : group) {
          const TensorView& t = *model.find(name);
          if (!divisible(t)) {
            out.kept.push_back(t.name);
            continue;
          }
          std::vector<float> w(static_cast<size_t>(t.elements()));
          kernels::ref::dequantize_row(t.dtype, t.data, w.data(), t.elements());
          HEARTH_ASSIGN_OR_RETURN(QuantizedMatrix m, rtn_quantize(w, t.rows(), t.cols(), o.scheme));
          out.matrices.emplace_back(t.name, std::move(m));
        }
      }
      if (progress) progress(l, c.n_layers, seconds_since(tl));
    }
    out.seconds = seconds_since(t0);
    return out;
  }

  if (calibration.empty()) return make_error(ErrorCode::kInvalidArgument, "GPTQ needs calibration samples");
  int32_t seq_len = 0;
  for (const auto& s : calibration) {
    if (s.empty()) return make_error(ErrorCode::kInvalidArgument, "an empty calibration sample");
    seq_len = std::max(seq_len, static_cast<int32_t>(s.size()));
  }
  if (seq_len > c.max_context) {
    return make_error(ErrorCode::kInvalidArgument, "--seq-len {} is longer than the model's context of {}", seq_len,
                      c.max_context);
  }

  // The engine's forward pass, watched, a layer at a time. Only the layer being
  // calibrated runs, so only its matrices are widened to float32 (the views of every
  // other tensor stay on the model's own memory). Each group of matrices reading one
  // input gets its Hessian when the input is first seen (an expert no calibration token
  // chose gets none, and is rounded to nearest rather than zeroed by GPTQ).
  std::vector<std::optional<Hessian>> hessians;
  std::unordered_map<std::string, size_t> observed;  // a group's first matrix -> its group
  auto observe = [&](const TensorView& w, const float* x, int64_t n) {
    const auto it = observed.find(std::string(w.name));
    if (it == observed.end()) return;
    std::optional<Hessian>& h = hessians[it->second];
    if (!h) h.emplace(w.cols());
    h->add(x, n, &pool);
  };
  auto backend = std::make_unique<ObservedBackend>(make_cpu_backend({false, o.threads}), observe);
  const int32_t block = 16;
  HEARTH_ASSIGN_OR_RETURN(KvCache cache, KvCache::create(*backend, {c.n_layers, c.kv_dim(), block,
                                                                    (seq_len + block - 1) / block, KvDType::kF32}));
  KvSequence seq;
  HEARTH_RETURN_IF_ERROR(kv_sequence_reserve(cache, seq, seq_len));
  auto input_for = [&](const std::vector<TokenId>& tokens) {
    ModelInput in;
    in.clear(block);
    (void)in.add_sequence(tokens, 0, seq.blocks, false);  // the blocks cover seq_len positions
    return in;
  };

  std::vector<std::vector<float>> hidden(calibration.size());  // each sample's input to the current layer
  std::vector<float> scratch;
  std::vector<TensorView> views = model.tensors;
  std::unordered_map<std::string, size_t> view_of;
  for (size_t i = 0; i < views.size(); ++i) view_of.emplace(views[i].name, i);
  for (int32_t layer = 0; layer < c.n_layers; ++layer) {
    const auto tl = std::chrono::steady_clock::now();
    const std::vector<std::vector<std::string>> groups = linear_groups(c, layer);
    // This layer's matrices in float32, bound in place of the model's own.
    std::map<std::string, std::vector<float>, std::less<>> weights;
    observed.clear();
    for (size_t g = 0; g < groups.size(); ++g) {
      observed.emplace(groups[g].front(), g);
      for (const std::string& name : groups[g]) {
        TensorView& v = views[view_of.at(name)];
        std::vector<float>& w = weights[name];
        w.resize(static_cast<size_t>(v.elements()));
        kernels::ref::dequantize_row(v.dtype, v.data, w.data(), v.elements());
        v.dtype = DType::kF32;
        v.data = reinterpret_cast<const std::byte*>(w.data());
        v.bytes = w.size() * sizeof(float);
      }
    }
    HEARTH_ASSIGN_OR_RETURN(std::unique_ptr<Model> llama,
                            Model::create(c, views, *backend, seq_len, {kLayoutPlain, nullptr}));
    if (layer == 0) {
      for (size_t s = 0; s < calibration.size(); ++s) {
        hidden[s].resize(calibration[s].size() * static_cast<size_t>(c.dim));
        HEARTH_RETURN_IF_ERROR(llama->embed(input_for(calibration[s]), cache, hidden[s].data()));
        out.hidden_bytes += hidden[s].size() * sizeof(float);
      }
    }
    hessians.assign(groups.size(), std::nullopt);
    // Pass 1: the layer in float, its inputs into the Hessians.
    backend->observe(true);
    for (size_t s = 0; s < calibration.size(); ++s) {
      scratch = hidden[s];
      HEARTH_RETURN_IF_ERROR(llama->run_layer(input_for(calibration[s]), cache, layer, scratch.data()));
    }
    backend->observe(false);
    uint64_t hbytes = 0;
    for (const std::optional<Hessian>& h : hessians) {
      if (h) hbytes += static_cast<uint64_t>(h->cols() * h->cols()) * sizeof(double);
    }
    out.hessian_bytes = std::max(out.hessian_bytes, hbytes);
    // Each input's factor once, then the matrices reading it; the float copies then hold
    // the quantized values, so pass 2 sees them.
    for (size_t g = 0; g < groups.size(); ++g) {
      std::optional<GptqFactor> factor;
      for (const std::string& name : groups[g]) {
        const TensorView& t = *model.find(name);
        if (!divisible(t)) {
          out.kept.push_back(name);
          continue;
        }
        std::vector<float>& w = weights.find(name)->second;
        QuantizedMatrix m;
        if (!hessians[g]) {  // an expert no calibration token reached
          HEARTH_ASSIGN_OR_RETURN(m, rtn_quantize(w, t.rows(), t.cols(), o.scheme));
          out.unobserved.push_back(name);
        } else {
          if (!factor) {
            HEARTH_ASSIGN_OR_RETURN(factor, gptq_factor(hessians[g]->take(), t.cols(), o.scheme.act_order, o.damp,
                                                        &pool));
          }
          HEARTH_ASSIGN_OR_RETURN(m, gptq_quantize(w, t.rows(), t.cols(), *factor, o.scheme, &pool));
        }
        const std::vector<float> values = m.dequantize();
        std::copy(values.begin(), values.end(), w.begin());  // in place: the bound views point here
        out.matrices.emplace_back(name, std::move(m));
      }
      hessians[g].reset();
    }
    // Pass 2: the quantized layer gives the next layer's inputs.
    for (size_t s = 0; s < calibration.size(); ++s) {
      HEARTH_RETURN_IF_ERROR(llama->run_layer(input_for(calibration[s]), cache, layer, hidden[s].data()));
    }
    llama.reset();
    for (const auto& [name, w] : weights) {  // back to the model's own memory before the float copies go
      views[view_of.at(name)] = *model.find(name);
    }
    if (progress) progress(layer, c.n_layers, seconds_since(tl));
  }
  out.seconds = seconds_since(t0);
  return out;
}

Result<RepackedMatrix> to_gguf_blocks(const QuantizedMatrix& m) {
  if (!m.scheme.sym || m.cols % 32 != 0 || m.scheme.group_size % 32 != 0) {
    return make_error(ErrorCode::kUnsupported, "a {} matrix does not fit GGUF blocks (symmetric, 32-value groups)",
                      scheme_name(m.scheme));
  }
  RepackedMatrix out;
  out.rows = m.rows;
  out.cols = m.cols;
  // Act-order with scattered groups: the columns sorted by group, the order kept.
  HEARTH_ASSIGN_OR_RETURN(out.perm, columns_by_group(m.g_idx, m.scheme.group_size));
  std::vector<int32_t> order = out.perm;
  if (order.empty()) {
    order.resize(static_cast<size_t>(m.cols));
    std::iota(order.begin(), order.end(), 0);
  }
  if (m.scheme.bits == 4) {
    out.type = DType::kQ4_0;
    out.bytes = blocks_of<BlockQ4_0>(m, order, [](BlockQ4_0& blk, const uint8_t* q) {
      for (int j = 0; j < 16; ++j) blk.qs[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
    });
  } else {
    out.type = DType::kQ8_0;
    out.bytes = blocks_of<BlockQ8_0>(m, order, [](BlockQ8_0& blk, const uint8_t* q) {
      for (int j = 0; j < 32; ++j) blk.qs[j] = static_cast<int8_t>(static_cast<int32_t>(q[j]) - 128);
    });
  }
  return out;
}

Status write_quantized_gguf(const LoadedModel& model, const QuantizedModel& quantized,
                            const std::filesystem::path& path) {
  // The model as written: views of the source, with the quantized matrices (and what
  // act-order adds: .perm orders, reordered gate and up rows) in blocks of their own.
  LoadedModel out;
  out.config = model.config;
  out.format = model.format;
  out.name = model.name;
  out.tokenizer = model.tokenizer;
  out.tensors = model.tensors;
  std::vector<std::pair<std::string, RepackedMatrix>> blocks;
  for (const auto& [name, m] : quantized.matrices) {
    auto r = to_gguf_blocks(m);
    if (!r.is_ok()) return r.status().with_context(name);
    blocks.emplace_back(name, std::move(r).value());
  }
  HEARTH_RETURN_IF_ERROR(prequant_place(out, std::move(blocks)));
  auto as_stored = [&](const std::string& name) -> std::optional<ExportedTensor> {
    const TensorView* t = out.find(name);
    if (t == nullptr || dtype_row_group(t->dtype) != 1) return std::nullopt;
    return ExportedTensor{t->dtype, std::vector<std::byte>(t->data, t->data + t->bytes)};
  };
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  Status st = gguf_export(out, DType::kF32, tmp, as_stored);
  std::error_code ec;
  if (st.is_ok()) {
    std::filesystem::rename(tmp, path, ec);
    if (ec) st = make_error(ErrorCode::kIo, "cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
  }
  if (!st.is_ok()) std::filesystem::remove(tmp, ec);
  return st;
}

namespace {

// AutoGPTQ's packing of one matrix: qweight [cols / pack, rows] (low bits first along
// the input dimension), qzeros [groups, rows / pack] (zero - zero_offset, along the
// output dimension).
void pack_gptq(const QuantizedMatrix& m, int32_t zero_offset, std::vector<int32_t>& qweight,
               std::vector<int32_t>& qzeros) {
  const int bits = m.scheme.bits, pack = 32 / bits;
  qweight.assign(static_cast<size_t>(m.cols / pack * m.rows), 0);
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t c = 0; c < m.cols; ++c) {
      auto& w = qweight[static_cast<size_t>((c / pack) * m.rows + r)];
      w = static_cast<int32_t>(static_cast<uint32_t>(w) |
                               (static_cast<uint32_t>(m.q[static_cast<size_t>(r * m.cols + c)]) << ((c % pack) * bits)));
    }
  }
  qzeros.assign(static_cast<size_t>(m.groups() * (m.rows / pack)), 0);
  for (int64_t g = 0; g < m.groups(); ++g) {
    for (int64_t r = 0; r < m.rows; ++r) {
      const auto z = static_cast<uint32_t>(m.zeros[static_cast<size_t>(g * m.rows + r)] - zero_offset);
      auto& w = qzeros[static_cast<size_t>(g * (m.rows / pack) + r / pack)];
      w = static_cast<int32_t>(static_cast<uint32_t>(w) | (z << ((r % pack) * bits)));
    }
  }
}

}  // namespace

Status write_quantized_hf(const LoadedModel& model, const QuantizedModel& quantized, const ModelQuantOptions& o,
                          const std::filesystem::path& source_dir, const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(out, ec) && !(fs::is_directory(out, ec) && fs::is_empty(out, ec))) {
    return make_error(ErrorCode::kInvalidArgument, "{} exists and is not an empty directory", out.string());
  }
  HEARTH_ASSIGN_OR_RETURN(std::string config_text, read_small_file(source_dir / "config.json", 16 << 20));
  HEARTH_ASSIGN_OR_RETURN(boost::json::value config, json_parse(config_text, "config.json"));
  if (!config.is_object()) return make_error(ErrorCode::kFormat, "config.json is not a JSON object");
  const bool v1 = o.scheme.sym;
  config.as_object()["quantization_config"] = {
      {"quant_method", "gptq"},          {"bits", o.scheme.bits},
      {"group_size", o.scheme.group_size}, {"desc_act", o.scheme.act_order},
      {"static_groups", o.scheme.static_groups}, {"sym", o.scheme.sym},
      {"damp_percent", o.damp},          {"true_sequential", false},
      {"checkpoint_format", v1 ? "gptq" : "gptq_v2"}};

  std::map<std::string, const QuantizedMatrix*, std::less<>> by_name;
  for (const auto& [name, m] : quantized.matrices) by_name[name] = &m;
  SafetensorsWriter w;
  for (const TensorView& t : model.tensors) {
    const std::optional<std::string> hf = hf_parameter_name(t.name, model.config.architecture);
    if (!hf) return make_error(ErrorCode::kInternal, "no Hugging Face name for {}", t.name);
    const std::vector<int64_t> shape(t.shape.begin(), t.shape.begin() + t.n_dims);
    const auto it = by_name.find(t.name);
    if (it == by_name.end()) {
      if (hf_norms_offset_by_one(model.config.architecture) && t.name.ends_with("norm.weight")) {
        // The loader holds Gemma's norms as 1 + w; the checkpoint stores w.
        std::vector<float> values(static_cast<size_t>(t.elements()));
        kernels::ref::dequantize_row(t.dtype, t.data, values.data(), t.elements());
        for (float& v : values) v -= 1.0f;
        HEARTH_RETURN_IF_ERROR(w.add(*hf, DType::kF32, shape, std::as_bytes(std::span(values))));
        continue;
      }
      if (t.dtype == DType::kF32 || t.dtype == DType::kF16 || t.dtype == DType::kBF16) {
        HEARTH_RETURN_IF_ERROR(w.add(*hf, t.dtype, shape, {t.data, t.bytes}));
      } else {
        std::vector<float> values(static_cast<size_t>(t.elements()));
        kernels::ref::dequantize_row(t.dtype, t.data, values.data(), t.elements());
        HEARTH_RETURN_IF_ERROR(w.add(*hf, DType::kF32, shape, std::as_bytes(std::span(values))));
      }
      continue;
    }
    const QuantizedMatrix& m = *it->second;
    const std::string module = hf->substr(0, hf->size() - std::string_view(".weight").size());
    std::vector<int32_t> qweight, qzeros;
    pack_gptq(m, v1 ? 1 : 0, qweight, qzeros);
    const int64_t pack = 32 / m.scheme.bits;
    HEARTH_RETURN_IF_ERROR(w.add_int32(module + ".qweight", std::vector<int64_t>{m.cols / pack, m.rows}, qweight));
    HEARTH_RETURN_IF_ERROR(w.add_int32(module + ".qzeros", std::vector<int64_t>{m.groups(), m.rows / pack}, qzeros));
    HEARTH_RETURN_IF_ERROR(w.add(module + ".scales", DType::kF16, std::vector<int64_t>{m.groups(), m.rows},
                                 std::as_bytes(std::span(m.scales))));
    HEARTH_RETURN_IF_ERROR(w.add_int32(module + ".g_idx", std::vector<int64_t>{m.cols}, m.g_idx));
  }

  fs::path tmp = out;
  tmp += fmt::format(".tmp.{}", ::getpid());
  auto write_all = [&]() -> Status {
    fs::create_directories(tmp, ec);
    if (ec) return make_error(ErrorCode::kIo, "cannot create {}: {}", tmp.string(), ec.message());
    HEARTH_RETURN_IF_ERROR(w.write(tmp / "model.safetensors"));
    {
      std::ofstream f(tmp / "config.json");
      f << boost::json::serialize(config) << "\n";
      if (!f.good()) return make_error(ErrorCode::kIo, "cannot write {}", (tmp / "config.json").string());
    }
    for (const char* name : {"tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                             "generation_config.json", "chat_template.jinja", "chat_template.json"}) {
      if (!fs::exists(source_dir / name)) continue;
      fs::copy_file(source_dir / name, tmp / name, ec);
      if (ec) return make_error(ErrorCode::kIo, "cannot copy {}: {}", name, ec.message());
    }
    if (fs::exists(out)) fs::remove(out, ec);  // an empty directory
    fs::rename(tmp, out, ec);
    if (ec) return make_error(ErrorCode::kIo, "cannot rename {} to {}: {}", tmp.string(), out.string(), ec.message());
    return Status::ok();
  };
  Status st = write_all();
  if (!st.is_ok()) fs::remove_all(tmp, ec);
  return st;
}

}  // namespace hearth::quant
