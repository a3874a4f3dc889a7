#include "engine/model.h"

#include <cmath>
#include <unordered_map>

#include "common/check.h"
#include "common/model_tensors.h"
#include "kernels/reference/reference.h"

namespace hearth {

Result<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelConfig& config, std::span<const TensorView> tensors,
                                                       Backend& backend, int32_t max_batch_tokens) {
  HEARTH_RETURN_IF_ERROR(model_config_validate(config));
  std::vector<TensorView> own(tensors.begin(), tensors.end());
  HEARTH_RETURN_IF_ERROR(llama_check_tensors(config, own));
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

  std::unique_ptr<LlamaModel> m(new LlamaModel(config, backend));
  m->max_batch_tokens_ = max_batch_tokens;
  m->tensors_ = std::move(own);
  std::unordered_map<std::string_view, const TensorView*> by_name;
  for (const TensorView& t : m->tensors_) by_name.emplace(t.name, &t);
  auto find = [&](const std::string& name) -> const TensorView* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };

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

  m->token_embd_ = find("token_embd.weight");
  m->output_ = find("output.weight");
  if (m->output_ == nullptr) m->output_ = m->token_embd_;  // tied embeddings
  add_vector(find("output_norm.weight"), &m->output_norm_);
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
    add_vector(find(p + "attn_norm.weight"), &l.attn_norm);
    add_vector(find(p + "ffn_norm.weight"), &l.ffn_norm);
    add_vector(find(p + "attn_q.bias"), &l.q_bias);
    add_vector(find(p + "attn_k.bias"), &l.k_bias);
    add_vector(find(p + "attn_v.bias"), &l.v_bias);
  }
  std::vector<float> freq_factors;
  if (const TensorView* f = find("rope_freqs.weight")) {
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

  const size_t n = static_cast<size_t>(max_batch_tokens);
  auto act = [&](int64_t width, BackendBuffer& buf) -> Status {
    HEARTH_ASSIGN_OR_RETURN(buf, backend.alloc(n * static_cast<size_t>(width) * sizeof(float)));
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(act(config.dim, m->x_));
  HEARTH_RETURN_IF_ERROR(act(std::max(config.dim, config.q_dim()), m->xn_));
  HEARTH_RETURN_IF_ERROR(act(config.q_dim(), m->q_));
  HEARTH_RETURN_IF_ERROR(act(config.kv_dim(), m->k_));
  HEARTH_RETURN_IF_ERROR(act(config.kv_dim(), m->v_));
  HEARTH_RETURN_IF_ERROR(act(config.q_dim(), m->att_));
  HEARTH_RETURN_IF_ERROR(act(config.hidden_dim, m->gate_));
  HEARTH_RETURN_IF_ERROR(act(config.hidden_dim, m->up_));
  HEARTH_ASSIGN_OR_RETURN(m->logits_in_, backend.alloc(kLogitChunk * static_cast<size_t>(config.dim) * sizeof(float)));
  HEARTH_ASSIGN_OR_RETURN(m->logits_, backend.alloc(kLogitChunk * static_cast<size_t>(config.vocab_size) * sizeof(float)));
  m->slots_.resize(n);
  m->attention_params_.reserve(n);  // at most one sequence per token
  return m;
}

Status LlamaModel::validate(const ForwardBatch& b, const KvCache& cache) const {
  const auto n = static_cast<int64_t>(b.tokens.size());
  if (n == 0) return make_error(ErrorCode::kInvalidArgument, "empty batch");
  if (n > max_batch_tokens_) {
    return make_error(ErrorCode::kInvalidArgument, "batch of {} tokens exceeds the model's limit of {}", n,
                      max_batch_tokens_);
  }
  if (b.positions.size() != b.tokens.size()) {
    return make_error(ErrorCode::kInvalidArgument, "batch has {} tokens but {} positions", n, b.positions.size());
  }
  for (TokenId t : b.tokens) {
    if (t < 0 || t >= config_.vocab_size) {
      return make_error(ErrorCode::kOutOfRange, "token id {} is outside the vocabulary (0..{})", t,
                        config_.vocab_size - 1);
    }
  }
  int64_t next_row = 0;
  const int32_t bs = cache.config().block_size;
  for (const BatchSequence& s : b.sequences) {
    if (s.token_begin != next_row || s.n_tokens < 1 || s.kv == nullptr || s.token_begin + s.n_tokens > n) {
      return make_error(ErrorCode::kInvalidArgument, "batch sequences must cover the tokens in order");
    }
    for (int32_t block : s.kv->blocks) {
      if (block < 0 || block >= cache.config().n_blocks) {
        return make_error(ErrorCode::kInvalidArgument, "KV block {} is not in the cache", block);
      }
    }
    for (int32_t r = s.token_begin; r < s.token_begin + s.n_tokens; ++r) {
      const int32_t pos = b.positions[static_cast<size_t>(r)];
      if (pos < 0 || pos >= config_.max_context) {
        return make_error(ErrorCode::kOutOfRange, "position {} is outside the model's context of {}", pos,
                          config_.max_context);
      }
      if (static_cast<size_t>(pos / bs) >= s.kv->blocks.size()) {
        return make_error(ErrorCode::kInvalidArgument, "position {} has no KV block", pos);
      }
    }
    next_row = s.token_begin + s.n_tokens;
  }
  if (next_row != n) return make_error(ErrorCode::kInvalidArgument, "batch sequences must cover the tokens in order");
  if (static_cast<int64_t>(b.logit_rows.size()) > n) {
    return make_error(ErrorCode::kInvalidArgument, "more logit rows than tokens");
  }
  for (int32_t r : b.logit_rows) {
    if (r < 0 || r >= n) return make_error(ErrorCode::kInvalidArgument, "logit row {} is not in the batch", r);
  }
  return Status::ok();
}

Status LlamaModel::forward(const ForwardBatch& b, KvCache& cache, float* logits) {
  HEARTH_RETURN_IF_ERROR(validate(b, cache));
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(b.tokens.size());
  const int64_t dim = c.dim, q_dim = c.q_dim(), kv_dim = c.kv_dim(), ffn = c.hidden_dim;
  const int32_t bs = cache.config().block_size;
  Backend& be = backend_;
  float* x = x_.f32();
  float* xn = xn_.f32();
  float* q = q_.f32();
  float* k = k_.f32();
  float* v = v_.f32();
  float* att = att_.f32();
  float* gate = gate_.f32();
  float* up = up_.f32();

  for (const BatchSequence& s : b.sequences) {
    for (int32_t r = s.token_begin; r < s.token_begin + s.n_tokens; ++r) {
      slots_[static_cast<size_t>(r)] = s.kv->slot(b.positions[static_cast<size_t>(r)], bs);
    }
  }

  be.embedding(*token_embd_, b.tokens.data(), n, x);
  be.rms_norm(x, layers_[0].attn_norm, n, dim, c.norm_eps, xn);
  for (int32_t li = 0; li < c.n_layers; ++li) {
    const Layer& l = layers_[static_cast<size_t>(li)];
    // Attention block (xn: this layer's attention norm of x).
    const MatmulTarget qkv[] = {{l.attn_q, q}, {l.attn_k, k}, {l.attn_v, v}};  // [n, q_dim], [n, kv_dim] x 2
    be.matmuls(xn, n, qkv);
    if (l.q_bias != nullptr) {
      be.add_bias(q, l.q_bias, n, q_dim);
      be.add_bias(k, l.k_bias, n, kv_dim);
      be.add_bias(v, l.v_bias, n, kv_dim);
    }
    be.rope(q, n, c.n_heads, c.head_dim, b.positions.data(), inv_freq_buf_.f32(), c.rope_style);
    be.rope(k, n, c.n_kv_heads, c.head_dim, b.positions.data(), inv_freq_buf_.f32(), c.rope_style);
    be.kv_store({k, v, cache.k(li), cache.v(li), slots_.data(), n, c.n_kv_heads, c.head_dim, bs});
    attention_params_.clear();
    for (const BatchSequence& s : b.sequences) {
      kernels::AttentionParams& p = attention_params_.emplace_back();
      p.q = q + static_cast<int64_t>(s.token_begin) * q_dim;
      p.out = att + static_cast<int64_t>(s.token_begin) * q_dim;
      p.k_cache = cache.k(li);
      p.v_cache = cache.v(li);
      p.block_table = s.kv->blocks.data();
      p.positions = b.positions.data() + s.token_begin;
      p.block_size = bs;
      p.n_tokens = s.n_tokens;
      p.n_heads = c.n_heads;
      p.n_kv_heads = c.n_kv_heads;
      p.head_dim = c.head_dim;
      p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      p.sliding_window = c.sliding_window;
    }
    be.attention_batch(attention_params_);
    be.matmul(*l.attn_output, att, n, xn);  // [n, dim]
    // Feed-forward block: the residual add fused with its norm.
    be.add_rms_norm(x, xn, l.ffn_norm, n, dim, c.norm_eps, xn);
    const MatmulTarget gate_up[] = {{l.ffn_gate, gate}, {l.ffn_up, up}};  // [n, ffn] each
    be.matmuls(xn, n, gate_up);
    be.swiglu(gate, up, n * ffn, gate);
    be.matmul(*l.ffn_down, gate, n, xn);  // [n, dim]
    if (li + 1 < c.n_layers) {
      be.add_rms_norm(x, xn, layers_[static_cast<size_t>(li) + 1].attn_norm, n, dim, c.norm_eps, xn);
    } else {
      be.add(x, xn, n * dim);
    }
  }

  const auto n_logits = static_cast<int64_t>(b.logit_rows.size());
  // Gather the rows whose logits are wanted, normalise, project onto the vocabulary in
  // chunks of the logits buffer.
  const int64_t vocab = c.vocab_size;
  float* rows = logits_in_.f32();
  for (int64_t i0 = 0; i0 < n_logits; i0 += kLogitChunk) {
    const int64_t m = std::min<int64_t>(kLogitChunk, n_logits - i0);
    be.gather_rows(x, b.logit_rows.data() + i0, m, dim, rows);
    be.rms_norm(rows, output_norm_, m, dim, c.norm_eps, rows);
    be.matmul(*output_, rows, m, logits_.f32());  // [m, vocab]
    be.read(logits_, 0, logits + i0 * vocab, static_cast<size_t>(m * vocab) * sizeof(float));
  }
  return Status::ok();
}

}  // namespace hearth
