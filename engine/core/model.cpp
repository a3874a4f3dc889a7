#include "engine/core/model.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "common/check.h"
#include "common/model_tensors.h"
#include "common/test_point.h"
#include "kernels/reference/reference.h"

namespace hearth {
namespace {

// A `.perm` tensor ([cols] float values, each an input column) as int32, checked to be
// a permutation of [0, cols).
Result<std::vector<int32_t>> read_column_order(const TensorView& t, int64_t cols) {
  std::vector<float> values(static_cast<size_t>(t.elements()));
  kernels::ref::dequantize_row(t.dtype, t.data, values.data(), t.elements());
  std::vector<int32_t> perm(values.size());
  std::vector<bool> taken(static_cast<size_t>(cols));
  for (size_t j = 0; j < values.size(); ++j) {
    const float v = values[j];
    if (!(v >= 0.0f && v < static_cast<float>(cols)) || v != std::floor(v) || taken[static_cast<size_t>(v)]) {
      return make_error(ErrorCode::kFormat, "{}[{}] = {} is not one of the {} columns, each taken once", t.name, j, v,
                        cols);
    }
    taken[static_cast<size_t>(v)] = true;
    perm[j] = static_cast<int32_t>(v);
  }
  return perm;
}

}  // namespace

Result<ModelConfig> model_rank_config(const ModelConfig& config, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return make_error(ErrorCode::kInvalidArgument, "rank {} of {} is not a rank of a group", rank, size);
  }
  if (config.n_heads % size != 0 || config.n_kv_heads % size != 0 || config.hidden_dim % size != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "{} query heads, {} KV heads and an FFN of {} do not split evenly over {} ranks", config.n_heads,
                      config.n_kv_heads, config.hidden_dim, size);
  }
  ModelConfig c = config;
  c.n_heads /= size;
  c.n_kv_heads /= size;
  c.hidden_dim /= size;
  return c;
}

Result<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelConfig& config, std::span<const TensorView> tensors,
                                                       Backend& backend, int32_t max_batch_tokens,
                                                       const ModelOptions& options) {
  HEARTH_RETURN_IF_ERROR(model_config_validate(config));
  std::unique_ptr<Communicator> own_comm;
  Communicator* comm = options.comm;
  if (comm == nullptr) {
    own_comm = make_single_rank_communicator();
    comm = own_comm.get();
  }
  HEARTH_ASSIGN_OR_RETURN(const ModelConfig rank_config, model_rank_config(config, comm->rank(), comm->size()));
  std::vector<TensorView> own(tensors.begin(), tensors.end());
  HEARTH_RETURN_IF_ERROR(llama_check_tensors(rank_config, own));
  if (max_batch_tokens < 1 || max_batch_tokens > (1 << 20)) {
    return make_error(ErrorCode::kInvalidArgument, "max batch tokens {} is out of range", max_batch_tokens);
  }
  for (const TensorView& t : own) {
    if (t.name == "token_embd.weight" && dtype_row_group(t.dtype) > 1) {
      return make_error(ErrorCode::kUnsupported, "token_embd.weight is row-interleaved ({}); embeddings are looked up "
                        "row by row and must be stored plain", dtype_name(t.dtype));
    }
    if (t.n_dims == 2 && !backend.supports(BackendOp::kMatmul, t.dtype)) {
      return make_error(ErrorCode::kUnsupported, "the {} backend has no matmul for {} weights ({})", backend.name(),
                        dtype_name(t.dtype), t.name);
    }
  }

  std::string_view layout = options.layout;
  if (layout.empty()) {
    layout = std::any_of(own.begin(), own.end(), [](const TensorView& t) { return dtype_row_group(t.dtype) > 1; })
                 ? kLayoutCpuR16
                 : kLayoutPlain;
  }

  std::unique_ptr<LlamaModel> m(new LlamaModel(config, backend, *comm));
  m->own_comm_ = std::move(own_comm);
  m->rank_config_ = rank_config;
  m->max_batch_tokens_ = max_batch_tokens;
  HEARTH_ASSIGN_OR_RETURN(m->weights_, backend.bind_weights(own, layout));
  // Matrices are read through the backend's handles, small vectors from the host views.
  std::unordered_map<std::string_view, const TensorView*> bound, on_host;
  for (const TensorView& t : m->weights_->tensors()) bound.emplace(t.name, &t);
  for (const TensorView& t : own) on_host.emplace(t.name, &t);
  auto lookup = [](const auto& by_name, const std::string& name) -> const TensorView* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };
  auto find = [&](const std::string& name) { return lookup(bound, name); };
  auto find_host = [&](const std::string& name) { return lookup(on_host, name); };

  // Norms, biases and rope factors become float32 copies in one buffer.
  std::vector<float> host;
  std::vector<std::pair<const float**, size_t>> fixups;  // pointer to set, offset in host
  auto add_vector = [&](const TensorView* t, const float** target) {
    if (t == nullptr) return;
    const size_t offset = host.size();
    host.resize(offset + static_cast<size_t>(t->elements()));
    kernels::ref::dequantize_row(t->dtype, t->data, host.data() + offset, t->elements());
    fixups.emplace_back(target, offset);
  };

  // Column orders (act-order matrices): int32 copies in one buffer, equal ones shared.
  std::vector<int32_t> perm_host;
  std::vector<std::pair<const int32_t**, size_t>> perm_fixups;  // pointer to set, offset in perm_host
  auto add_perm = [&](const std::string& name, int64_t cols, std::vector<std::pair<size_t, int64_t>>& seen,
                      const int32_t** target) -> Status {
    const TensorView* t = find_host(name);
    if (t == nullptr) return Status::ok();
    HEARTH_ASSIGN_OR_RETURN(std::vector<int32_t> perm, read_column_order(*t, cols));
    for (const auto& [offset, n] : seen) {
      if (n == cols && std::equal(perm.begin(), perm.end(), perm_host.begin() + static_cast<ptrdiff_t>(offset))) {
        perm_fixups.emplace_back(target, offset);
        return Status::ok();
      }
    }
    seen.emplace_back(perm_host.size(), cols);
    perm_fixups.emplace_back(target, perm_host.size());
    perm_host.insert(perm_host.end(), perm.begin(), perm.end());
    return Status::ok();
  };

  m->token_embd_ = find("token_embd.weight");
  m->output_ = find("output.weight");
  if (m->output_ == nullptr) m->output_ = m->token_embd_;  // tied embeddings
  add_vector(find_host("output_norm.weight"), &m->output_norm_);
  m->layers_.resize(static_cast<size_t>(config.n_layers));
  for (int i = 0; i < config.n_layers; ++i) {
    Layer& l = m->layers_[static_cast<size_t>(i)];
    const std::string p = fmt::format("blk.{}.", i);
    l.attn_q = find(p + "attn_q.weight");
    l.attn_k = find(p + "attn_k.weight");
    l.attn_v = find(p + "attn_v.weight");
    l.attn_output = find(p + "attn_output.weight");
    l.ffn_gate = find(p + "ffn_gate.weight");
    l.ffn_up = find(p + "ffn_up.weight");
    l.ffn_down = find(p + "ffn_down.weight");
    add_vector(find_host(p + "attn_norm.weight"), &l.attn_norm);
    add_vector(find_host(p + "ffn_norm.weight"), &l.ffn_norm);
    add_vector(find_host(p + "attn_q.bias"), &l.q_bias);
    add_vector(find_host(p + "attn_k.bias"), &l.k_bias);
    add_vector(find_host(p + "attn_v.bias"), &l.v_bias);
    std::vector<std::pair<size_t, int64_t>> seen;
    HEARTH_RETURN_IF_ERROR(add_perm(p + "attn_q.perm", rank_config.dim, seen, &l.q_perm));
    HEARTH_RETURN_IF_ERROR(add_perm(p + "attn_k.perm", rank_config.dim, seen, &l.k_perm));
    HEARTH_RETURN_IF_ERROR(add_perm(p + "attn_v.perm", rank_config.dim, seen, &l.v_perm));
    HEARTH_RETURN_IF_ERROR(add_perm(p + "attn_output.perm", rank_config.q_dim(), seen, &l.output_perm));
    HEARTH_RETURN_IF_ERROR(add_perm(p + "ffn_gate.perm", rank_config.dim, seen, &l.gate_perm));
    HEARTH_RETURN_IF_ERROR(add_perm(p + "ffn_up.perm", rank_config.dim, seen, &l.up_perm));
  }
  std::vector<float> freq_factors;
  if (const TensorView* f = find_host("rope_freqs.weight")) {
    freq_factors.resize(static_cast<size_t>(f->elements()));
    kernels::ref::dequantize_row(f->dtype, f->data, freq_factors.data(), f->elements());
    for (float v : freq_factors) {
      if (!(v > 0.0f) || !std::isfinite(v)) {
        return make_error(ErrorCode::kFormat, "rope_freqs.weight holds {}, not a positive factor", v);
      }
    }
  }
  m->inv_freq_ = rope_inv_freq(config, freq_factors.empty() ? nullptr : freq_factors.data());

  HEARTH_ASSIGN_OR_RETURN(m->vectors_, backend.alloc(host.size() * sizeof(float)));
  backend.write(m->vectors_, 0, host.data(), host.size() * sizeof(float));
  for (auto& [target, offset] : fixups) *target = m->vectors_.f32() + offset;
  HEARTH_ASSIGN_OR_RETURN(m->inv_freq_buf_, backend.alloc(m->inv_freq_.size() * sizeof(float)));
  backend.write(m->inv_freq_buf_, 0, m->inv_freq_.data(), m->inv_freq_.size() * sizeof(float));
  if (!perm_host.empty()) {
    HEARTH_ASSIGN_OR_RETURN(m->perms_, backend.alloc(perm_host.size() * sizeof(int32_t)));
    backend.write(m->perms_, 0, perm_host.data(), perm_host.size() * sizeof(int32_t));
    for (auto& [target, offset] : perm_fixups) *target = static_cast<const int32_t*>(m->perms_.data()) + offset;
  }

  const ModelConfig& rc = rank_config;
  const size_t n = static_cast<size_t>(max_batch_tokens);
  auto act = [&](int64_t width, BackendBuffer& buf) -> Status {
    HEARTH_ASSIGN_OR_RETURN(buf, backend.alloc(n * static_cast<size_t>(width) * sizeof(float)));
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(act(rc.dim, m->x_));
  HEARTH_RETURN_IF_ERROR(act(std::max(rc.dim, rc.q_dim()), m->xn_));
  HEARTH_RETURN_IF_ERROR(act(rc.q_dim(), m->q_));
  HEARTH_RETURN_IF_ERROR(act(rc.kv_dim(), m->k_));
  HEARTH_RETURN_IF_ERROR(act(rc.kv_dim(), m->v_));
  HEARTH_RETURN_IF_ERROR(act(rc.q_dim(), m->att_));
  HEARTH_RETURN_IF_ERROR(act(rc.hidden_dim, m->gate_));
  HEARTH_RETURN_IF_ERROR(act(rc.hidden_dim, m->up_));
  if (!perm_host.empty()) HEARTH_RETURN_IF_ERROR(act(std::max(rc.dim, rc.q_dim()), m->xp_));
  HEARTH_ASSIGN_OR_RETURN(m->logits_in_, backend.alloc(kLogitChunk * static_cast<size_t>(config.dim) * sizeof(float)));
  HEARTH_ASSIGN_OR_RETURN(m->logits_, backend.alloc(kLogitChunk * static_cast<size_t>(config.vocab_size) * sizeof(float)));
  return m;
}

Status LlamaModel::check(const ModelInput& input, const KvCache& cache) const {
  const KvCacheConfig& kc = cache.config();
  HEARTH_RETURN_IF_ERROR(model_input_validate(
      input, {config_.vocab_size, max_batch_tokens_, config_.max_context, kc.n_blocks, kc.block_size}));
  if (kc.kv_dim != rank_config_.kv_dim() || kc.n_layers != rank_config_.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "the KV cache holds {} layers of {} values, the model {} of {}",
                      kc.n_layers, kc.kv_dim, rank_config_.n_layers, rank_config_.kv_dim());
  }
  return Status::ok();
}

Status LlamaModel::forward(const ModelInput& input, KvCache& cache, float* logits) {
  const int64_t vocab = rank_config_.vocab_size;
  return run(input, cache, logits != nullptr, [&](int64_t i0, int64_t m) {
    backend_.read(logits_, 0, logits + i0 * vocab, static_cast<size_t>(m * vocab) * sizeof(float));
  });
}

Status LlamaModel::forward_sampled(const ModelInput& input, KvCache& cache, std::span<const SampleRow> rows,
                                   std::span<SampledRow> out) {
  if (rows.size() != input.logit_rows.size() || out.size() != rows.size()) {
    return make_error(ErrorCode::kInternal, "{} sample rows and {} results for {} logit rows", rows.size(), out.size(),
                      input.logit_rows.size());
  }
  const int64_t vocab = rank_config_.vocab_size;
  return run(input, cache, true, [&](int64_t i0, int64_t m) {
    backend_.sample(logits_.f32(), vocab, rows.subspan(static_cast<size_t>(i0), static_cast<size_t>(m)),
                    out.subspan(static_cast<size_t>(i0), static_cast<size_t>(m)));
  });
}

Status LlamaModel::layer(int32_t li, const StepInput& step, KvCache& cache, const float* next_norm) {
  const KvCacheConfig& kc = cache.config();
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const Layer& l = layers_[static_cast<size_t>(li)];
  const int64_t n = step.n_tokens;
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.hidden_dim;
  float* x = x_.f32();
  float* xn = xn_.f32();
  float* q = q_.f32();
  float* k = k_.f32();
  float* v = v_.f32();
  float* att = att_.f32();
  float* gate = gate_.f32();
  float* up = up_.f32();
  // Attention block (xn: this layer's attention norm of x).
  const MatmulTarget qkv[] = {{l.attn_q, q}, {l.attn_k, k}, {l.attn_v, v}};  // [n, q_dim], [n, kv_dim] x 2
  const int32_t* const qkv_perms[] = {l.q_perm, l.k_perm, l.v_perm};
  permuted_matmuls(xn, n, dim, qkv, qkv_perms);
  if (l.q_bias != nullptr) {
    be.add_bias(q, l.q_bias, n, q_dim);
    be.add_bias(k, l.k_bias, n, kv_dim);
    be.add_bias(v, l.v_bias, n, kv_dim);
  }
  be.rope(q, n, c.n_heads, c.head_dim, step.positions, inv_freq_buf_.f32(), c.rope_style);
  be.rope(k, n, c.n_kv_heads, c.head_dim, step.positions, inv_freq_buf_.f32(), c.rope_style);
  be.kv_store({.k = k,
               .v = v,
               .k_cache = cache.k(li),
               .v_cache = cache.v(li),
               .slots = step.slots,
               .n_tokens = step.n_tokens,
               .n_kv_heads = c.n_kv_heads,
               .head_dim = c.head_dim,
               .block_size = step.block_size,
               .kv_dtype = kc.dtype});
  if (li == c.n_layers / 2) HEARTH_TEST_POINT("engine.kv.store");  // half the layers' K/V of this step written
  be.attention({.q = q,
                .out = att,
                .k_cache = cache.k(li),
                .v_cache = cache.v(li),
                .positions = step.positions,
                .query_start = step.query_start,
                .page_start = step.page_start,
                .pages = step.pages,
                .n_tokens = step.n_tokens,
                .n_seqs = step.n_seqs,
                .block_size = step.block_size,
                .n_heads = c.n_heads,
                .n_kv_heads = c.n_kv_heads,
                .head_dim = c.head_dim,
                .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                .sliding_window = c.sliding_window,
                .kv_dtype = kc.dtype});
  const MatmulTarget output[] = {{l.attn_output, xn}};  // [n, dim], this rank's partial sum
  const int32_t* const output_perms[] = {l.output_perm};
  permuted_matmuls(att, n, q_dim, output, output_perms);
  HEARTH_RETURN_IF_ERROR(comm_.all_reduce_sum(xn, n * dim, be.queue()));
  // Feed-forward block: the residual add fused with its norm.
  be.add_rms_norm(x, xn, l.ffn_norm, n, dim, c.norm_eps, xn);
  const MatmulTarget gate_up[] = {{l.ffn_gate, gate}, {l.ffn_up, up}};  // [n, ffn] each
  const int32_t* const gate_up_perms[] = {l.gate_perm, l.up_perm};
  permuted_matmuls(xn, n, dim, gate_up, gate_up_perms);
  be.swiglu(gate, up, n * ffn, gate);
  be.matmul(*l.ffn_down, gate, n, xn);  // [n, dim], this rank's partial sum
  HEARTH_RETURN_IF_ERROR(comm_.all_reduce_sum(xn, n * dim, be.queue()));
  if (next_norm != nullptr) {
    be.add_rms_norm(x, xn, next_norm, n, dim, c.norm_eps, xn);
  } else {
    be.add(x, xn, n * dim);
  }
  return Status::ok();
}

void LlamaModel::permuted_matmuls(const float* x, int64_t n, int64_t cols, std::span<const MatmulTarget> targets,
                                  std::span<const int32_t* const> perms) {
  if (std::all_of(perms.begin(), perms.end(), [](const int32_t* p) { return p == nullptr; })) {
    if (targets.size() == 1) {
      backend_.matmul(*targets[0].w, x, n, targets[0].y);
    } else {
      backend_.matmuls(x, n, targets);
    }
    return;
  }
  MatmulTarget group[4];
  uint32_t done = 0;  // bit i: targets[i] computed
  for (size_t i = 0; i < targets.size(); ++i) {
    if (done & (1u << i)) continue;
    size_t m = 0;
    for (size_t j = i; j < targets.size(); ++j) {
      if (perms[j] == perms[i]) {
        group[m++] = targets[j];
        done |= 1u << j;
      }
    }
    const float* in = x;
    if (perms[i] != nullptr) {
      backend_.permute_columns(x, n, cols, perms[i], xp_.f32());
      in = xp_.f32();
    }
    backend_.matmuls(in, n, std::span<const MatmulTarget>(group, m));
  }
}

Status LlamaModel::embed(const ModelInput& input, KvCache& cache, float* hidden) {
  HEARTH_RETURN_IF_ERROR(check(input, cache));
  const StepInput step = backend_.upload(input);
  backend_.embedding(*token_embd_, step.tokens, step.n_tokens, x_.f32());
  backend_.read(x_, 0, hidden, static_cast<size_t>(step.n_tokens * rank_config_.dim) * sizeof(float));
  return Status::ok();
}

Status LlamaModel::run_layer(const ModelInput& input, KvCache& cache, int32_t layer_index, float* hidden) {
  HEARTH_RETURN_IF_ERROR(check(input, cache));
  if (comm_.size() != 1) {
    return make_error(ErrorCode::kUnsupported, "a layer at a time runs on a single rank, not on rank {} of {}",
                      comm_.rank(), comm_.size());
  }
  if (layer_index < 0 || layer_index >= rank_config_.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "layer {} of a model of {} layers", layer_index,
                      rank_config_.n_layers);
  }
  const StepInput step = backend_.upload(input);
  const int64_t n = step.n_tokens, dim = rank_config_.dim;
  const size_t bytes = static_cast<size_t>(n * dim) * sizeof(float);
  backend_.write(x_, 0, hidden, bytes);
  backend_.rms_norm(x_.f32(), layers_[static_cast<size_t>(layer_index)].attn_norm, n, dim, rank_config_.norm_eps,
                    xn_.f32());
  HEARTH_RETURN_IF_ERROR(layer(layer_index, step, cache, nullptr));
  backend_.read(x_, 0, hidden, bytes);
  return Status::ok();
}

template <typename OnLogits>
Status LlamaModel::run(const ModelInput& input, KvCache& cache, bool lm_head, OnLogits&& on_logits) {
  HEARTH_RETURN_IF_ERROR(check(input, cache));
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const StepInput step = be.upload(input);
  const int64_t n = step.n_tokens;
  const int64_t dim = c.dim;
  float* x = x_.f32();
  float* xn = xn_.f32();

  be.embedding(*token_embd_, step.tokens, n, x);
  be.rms_norm(x, layers_[0].attn_norm, n, dim, c.norm_eps, xn);
  for (int32_t li = 0; li < c.n_layers; ++li) {
    const float* next_norm = li + 1 < c.n_layers ? layers_[static_cast<size_t>(li) + 1].attn_norm : nullptr;
    HEARTH_RETURN_IF_ERROR(layer(li, step, cache, next_norm));
  }

  if (!lm_head) return Status::ok();  // a rank that does not sample
  const auto n_logits = static_cast<int64_t>(step.n_logit_rows);
  // Gather the rows whose logits are wanted, normalise, project onto the vocabulary in
  // chunks of the logits buffer.
  float* rows = logits_in_.f32();
  for (int64_t i0 = 0; i0 < n_logits; i0 += kLogitChunk) {
    const int64_t m = std::min<int64_t>(kLogitChunk, n_logits - i0);
    be.gather_rows(x, step.logit_rows + i0, m, dim, rows);
    be.rms_norm(rows, output_norm_, m, dim, c.norm_eps, rows);
    be.matmul(*output_, rows, m, logits_.f32());  // [m, vocab]
    on_logits(i0, m);
  }
  return Status::ok();
}

}  // namespace hearth
