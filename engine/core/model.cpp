#include "engine/core/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
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

// A hash of an adapter's matrices (where, shape, scale, every factor) under `key` (the
// model's own, random: no adapter can be made to hash as another), never 0.
uint64_t lora_adapter_id(const LoraAdapter& adapter, uint64_t key) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ key;
  auto mix = [&h](uint64_t v) {
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  };
  for (const LoraMatrix& m : adapter.matrices) {
    mix(static_cast<uint64_t>(m.layer) << 8 | static_cast<uint64_t>(m.target));
    mix(static_cast<uint64_t>(m.rank));
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &m.scale, sizeof(scale_bits));
    mix(scale_bits);
    for (const std::vector<float>* v : {&m.a, &m.b}) {
      const std::span<const float> f(*v);
      size_t i = 0;
      for (; i + 2 <= f.size(); i += 2) {
        uint64_t word;
        std::memcpy(&word, f.data() + i, sizeof(word));
        mix(word);
      }
      if (i < f.size()) {
        uint32_t last;
        std::memcpy(&last, f.data() + i, sizeof(last));
        mix(last);
      }
    }
  }
  return h == 0 ? 1 : h;
}

}  // namespace

Result<ModelConfig> model_rank_config(const ModelConfig& config, int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return make_error(ErrorCode::kInvalidArgument, "rank {} of {} is not a rank of a group", rank, size);
  }
  if (config.n_heads % size != 0 || config.n_kv_heads % size != 0 || config.hidden_dim % size != 0 ||
      config.shared_expert_dim % size != 0 || config.dense_hidden_dim % size != 0) {
    return make_error(ErrorCode::kUnsupported,
                      "{} query heads, {} KV heads and an FFN of {} (shared expert {}, dense layers {}) do not split "
                      "evenly over {} ranks",
                      config.n_heads, config.n_kv_heads, config.hidden_dim, config.shared_expert_dim,
                      config.dense_hidden_dim, size);
  }
  ModelConfig c = config;
  c.n_heads /= size;
  c.n_kv_heads /= size;
  c.hidden_dim /= size;
  c.shared_expert_dim /= size;
  c.dense_hidden_dim /= size;
  return c;
}

namespace {

// What a rank's tensors must be for this model on this backend, before anything is bound.
Status check_rank_tensors(const ModelConfig& rank_config, const std::vector<TensorView>& own, const Backend& backend,
                          int32_t max_batch_tokens) {
  HEARTH_RETURN_IF_ERROR(model_check_tensors(rank_config, own));
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
  return Status::ok();
}

}  // namespace

// The small tensors a model copies to its backend: norms, biases and rope factors as
// float32 in one buffer, and the column orders of act-order matrices as int32 in another
// (equal orders of one layer stored once). Pointers into them are set once they are
// uploaded.
class HostCopies {
 public:
  explicit HostCopies(std::span<const TensorView> tensors) {
    for (const TensorView& t : tensors) by_name_.emplace(t.name, &t);
  }
  const TensorView* find(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

  void add_vector(const std::string& name, const float** target) {
    const TensorView* t = find(name);
    if (t == nullptr) return;
    const size_t offset = floats_.size();
    floats_.resize(offset + static_cast<size_t>(t->elements()));
    kernels::ref::dequantize_row(t->dtype, t->data, floats_.data() + offset, t->elements());
    float_targets_.emplace_back(target, offset);
  }

  // `seen`: this layer's orders so far (offset, columns), so that equal ones share.
  Status add_perm(const std::string& name, int64_t cols, std::vector<std::pair<size_t, int64_t>>& seen,
                  const int32_t** target) {
    const TensorView* t = find(name);
    if (t == nullptr) return Status::ok();
    HEARTH_ASSIGN_OR_RETURN(std::vector<int32_t> perm, read_column_order(*t, cols));
    for (const auto& [offset, n] : seen) {
      if (n == cols && std::equal(perm.begin(), perm.end(), ints_.begin() + static_cast<ptrdiff_t>(offset))) {
        int_targets_.emplace_back(target, offset);
        return Status::ok();
      }
    }
    seen.emplace_back(ints_.size(), cols);
    int_targets_.emplace_back(target, ints_.size());
    ints_.insert(ints_.end(), perm.begin(), perm.end());
    return Status::ok();
  }

  bool has_perms() const { return !ints_.empty(); }

  // Copies both to `backend` (into `floats` and `ints`) and points every target there.
  Status upload(Backend& backend, BackendBuffer& floats, BackendBuffer& ints) {
    HEARTH_ASSIGN_OR_RETURN(floats, backend.alloc(floats_.size() * sizeof(float)));
    backend.write(floats, 0, floats_.data(), floats_.size() * sizeof(float));
    for (auto& [target, offset] : float_targets_) *target = floats.f32() + offset;
    if (ints_.empty()) return Status::ok();
    HEARTH_ASSIGN_OR_RETURN(ints, backend.alloc(ints_.size() * sizeof(int32_t)));
    backend.write(ints, 0, ints_.data(), ints_.size() * sizeof(int32_t));
    for (auto& [target, offset] : int_targets_) *target = static_cast<const int32_t*>(ints.data()) + offset;
    return Status::ok();
  }

 private:
  std::unordered_map<std::string_view, const TensorView*> by_name_;
  std::vector<float> floats_;
  std::vector<std::pair<const float**, size_t>> float_targets_;
  std::vector<int32_t> ints_;
  std::vector<std::pair<const int32_t**, size_t>> int_targets_;
};

namespace {

// rope_freqs.weight (Llama 3's frequency factors) when the model has it: positive and finite.
Result<std::vector<float>> rope_factors(const HostCopies& host) {
  std::vector<float> factors;
  const TensorView* f = host.find("rope_freqs.weight");
  if (f == nullptr) return factors;
  factors.resize(static_cast<size_t>(f->elements()));
  kernels::ref::dequantize_row(f->dtype, f->data, factors.data(), f->elements());
  for (float v : factors) {
    if (!(v > 0.0f) || !std::isfinite(v)) {
      return make_error(ErrorCode::kFormat, "rope_freqs.weight holds {}, not a positive factor", v);
    }
  }
  return factors;
}

}  // namespace

Result<std::unique_ptr<Model>> Model::create(const ModelConfig& config, std::span<const TensorView> tensors,
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
  HEARTH_RETURN_IF_ERROR(check_rank_tensors(rank_config, own, backend, max_batch_tokens));
  std::string_view layout = options.layout;
  if (layout.empty()) {
    layout = std::any_of(own.begin(), own.end(), [](const TensorView& t) { return dtype_row_group(t.dtype) > 1; })
                 ? kLayoutCpuR16
                 : kLayoutPlain;
  }
  std::unique_ptr<Model> m(new Model(config, backend, *comm));
  m->own_comm_ = std::move(own_comm);
  m->rank_config_ = rank_config;
  m->max_batch_tokens_ = max_batch_tokens;
  HEARTH_ASSIGN_OR_RETURN(m->weights_, backend.bind_weights(own, layout));
  // Matrices are read through the backend's handles, small vectors from the host views.
  HostCopies host(own);
  HEARTH_RETURN_IF_ERROR(m->bind_layers(host));
  HEARTH_ASSIGN_OR_RETURN(const std::vector<float> factors, rope_factors(host));
  m->inv_freq_ = rope_inv_freq(config, factors.empty() ? nullptr : factors.data());
  HEARTH_RETURN_IF_ERROR(host.upload(backend, m->vectors_, m->perms_));
  HEARTH_ASSIGN_OR_RETURN(m->inv_freq_buf_, backend.alloc(m->inv_freq_.size() * sizeof(float)));
  backend.write(m->inv_freq_buf_, 0, m->inv_freq_.data(), m->inv_freq_.size() * sizeof(float));
  if (config.rope_local_theta > 0.0f) {
    const std::vector<float> local = rope_local_inv_freq(config);
    HEARTH_ASSIGN_OR_RETURN(m->local_inv_freq_buf_, backend.alloc(local.size() * sizeof(float)));
    backend.write(m->local_inv_freq_buf_, 0, local.data(), local.size() * sizeof(float));
  }
  HEARTH_RETURN_IF_ERROR(m->allocate_activations(host.has_perms()));
  if (options.max_adapters < 0 || options.max_adapters > 1024 || options.max_lora_rank < 0 ||
      options.max_lora_rank > 1024 || (options.max_adapters > 0) != (options.max_lora_rank > 0)) {
    return make_error(ErrorCode::kInvalidArgument,
                      "{} adapter slots of rank at most {}: both 1..1024, or both 0 (no adapters)",
                      options.max_adapters, options.max_lora_rank);
  }
  if (options.max_adapters > 0) {
    m->max_lora_rank_ = options.max_lora_rank;
    m->lora_slots_.resize(static_cast<size_t>(options.max_adapters));
    m->lora_loaded_.assign(static_cast<size_t>(options.max_adapters), false);
    m->lora_ids_.assign(static_cast<size_t>(options.max_adapters), 0);
    std::random_device random;
    m->lora_key_ = (uint64_t{random()} << 32) | random();
    m->lora_table_host_.assign(static_cast<size_t>(config.n_layers) * kLoraTargets * options.max_adapters, {});
    const size_t table_bytes = m->lora_table_host_.size() * sizeof(kernels::LoraFactors);
    HEARTH_ASSIGN_OR_RETURN(m->lora_table_, backend.alloc(table_bytes));
    HEARTH_ASSIGN_OR_RETURN(m->lora_scratch_, backend.alloc(static_cast<size_t>(max_batch_tokens) *
                                                            static_cast<size_t>(options.max_lora_rank) * sizeof(float)));
  }
  return m;
}

const TensorView* Model::lora_base(int32_t li, LoraTarget t) const {
  const Layer& l = layers_[static_cast<size_t>(li)];
  switch (t) {
    case LoraTarget::kQ: return l.attn_q;
    case LoraTarget::kK: return l.attn_k;
    case LoraTarget::kV: return l.attn_v;
    case LoraTarget::kOutput: return l.attn_output;
    case LoraTarget::kGate: return l.ffn_gate;
    case LoraTarget::kUp: return l.ffn_up;
    case LoraTarget::kDown: return l.ffn_down;
  }
  return nullptr;
}

bool Model::adapter_loaded(int32_t slot) const {
  return slot >= 0 && slot < adapter_slots() && lora_loaded_[static_cast<size_t>(slot)];
}

Status Model::set_adapter(int32_t slot, const LoraAdapter& adapter) {
  if (slot < 0 || slot >= adapter_slots()) {
    return make_error(ErrorCode::kInvalidArgument, "adapter slot {} is not one of the model's {}", slot,
                      adapter_slots());
  }
  const int rank = comm_.rank(), size = comm_.size();
  // Each matrix's share: where its A and B go in the slot's buffer, and which part.
  struct Share {
    const LoraMatrix* m;
    int64_t rows, cols;  // this rank's
    bool split_cols;     // row-parallel (attn_output, ffn_down): A's columns split, else B's rows
    size_t offset;       // floats into the slot's buffer
  };
  std::vector<Share> shares;
  size_t floats = 0;
  for (const LoraMatrix& m : adapter.matrices) {
    const std::string name = fmt::format("blk.{}.{}.weight", m.layer, lora_target_name(m.target));
    if (m.layer < 0 || m.layer >= config_.n_layers) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {}: {} is not in a model of {} layers", adapter.name,
                        name, config_.n_layers);
    }
    const TensorView* w = lora_base(m.layer, m.target);
    if (w == nullptr) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {}: the model has no matrix {} to adapt{}", adapter.name,
                        name, rank_config_.expert_layer(m.layer) ? " (a mixture-of-experts layer)" : "");
    }
    const bool split_cols = m.target == LoraTarget::kOutput || m.target == LoraTarget::kDown;
    const int64_t rows = w->rows(), cols = w->cols();
    const int64_t full_rows = split_cols ? rows : rows * size, full_cols = split_cols ? cols * size : cols;
    if (m.rows != full_rows || m.cols != full_cols) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {}: {} adapts a [{}, {}] matrix, the model's is [{}, {}]",
                        adapter.name, name, m.rows, m.cols, full_rows, full_cols);
    }
    if (m.rank < 1 || m.rank > max_lora_rank_) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {}: {} has rank {}, above the limit of {}", adapter.name,
                        name, m.rank, max_lora_rank_);
    }
    if (m.a.size() != static_cast<size_t>(m.rank * m.cols) || m.b.size() != static_cast<size_t>(m.rows * m.rank)) {
      return make_error(ErrorCode::kInvalidArgument, "adapter {}: {}'s factors hold {} and {} values", adapter.name,
                        name, m.a.size(), m.b.size());
    }
    for (const Share& sh : shares) {
      if (sh.m->layer == m.layer && sh.m->target == m.target) {
        return make_error(ErrorCode::kInvalidArgument, "adapter {}: {} is adapted twice", adapter.name, name);
      }
    }
    shares.push_back({&m, rows, cols, split_cols, floats});
    floats += static_cast<size_t>(m.rank * (cols + rows));
  }
  std::vector<float> host(floats);
  for (const Share& sh : shares) {
    const LoraMatrix& m = *sh.m;
    float* a = host.data() + sh.offset;
    float* b = a + m.rank * sh.cols;
    const int64_t c0 = sh.split_cols ? rank * sh.cols : 0;  // this rank's first column of A
    for (int64_t j = 0; j < m.rank; ++j) {
      std::copy_n(m.a.data() + j * m.cols + c0, sh.cols, a + j * sh.cols);
    }
    const int64_t r0 = sh.split_cols ? 0 : rank * sh.rows;  // and first row of B, stored transposed
    for (int64_t r = 0; r < sh.rows; ++r) {
      for (int64_t j = 0; j < m.rank; ++j) b[j * sh.rows + r] = m.b[static_cast<size_t>((r0 + r) * m.rank + j)];
    }
  }
  BackendBuffer buf;
  if (floats > 0) {
    HEARTH_ASSIGN_OR_RETURN(buf, backend_.alloc(floats * sizeof(float)));
    backend_.write(buf, 0, host.data(), floats * sizeof(float));
  }
  empty_lora_entries(slot);
  for (const Share& sh : shares) {
    const LoraMatrix& m = *sh.m;
    const float* a = buf.f32() + sh.offset;
    lora_table_host_[lora_entries(m.layer, m.target) + static_cast<size_t>(slot)] = {a, a + m.rank * sh.cols, m.rank,
                                                                                    m.scale};
  }
  backend_.write(lora_table_, 0, lora_table_host_.data(), lora_table_host_.size() * sizeof(kernels::LoraFactors));
  lora_slots_[static_cast<size_t>(slot)] = std::move(buf);
  lora_loaded_[static_cast<size_t>(slot)] = true;
  lora_ids_[static_cast<size_t>(slot)] = lora_adapter_id(adapter, lora_key_);
  return Status::ok();
}

size_t Model::lora_entries(int32_t li, LoraTarget t) const {
  return (static_cast<size_t>(li) * kLoraTargets + static_cast<size_t>(t)) * lora_slots_.size();
}

void Model::empty_lora_entries(int32_t slot) {
  for (size_t i = static_cast<size_t>(slot); i < lora_table_host_.size(); i += lora_slots_.size()) {
    lora_table_host_[i] = {};
  }
}

void Model::clear_adapter(int32_t slot) {
  if (slot < 0 || slot >= adapter_slots()) return;
  empty_lora_entries(slot);
  backend_.write(lora_table_, 0, lora_table_host_.data(), lora_table_host_.size() * sizeof(kernels::LoraFactors));
  backend_.synchronize();
  lora_slots_[static_cast<size_t>(slot)] = BackendBuffer();
  lora_loaded_[static_cast<size_t>(slot)] = false;
}

void Model::adapt(int32_t li, LoraTarget t, const float* x, int64_t in, float* y, int64_t out, int64_t n) {
  if (step_adapters_ == nullptr) return;
  const auto* table = static_cast<const kernels::LoraFactors*>(lora_table_.data()) + lora_entries(li, t);
  backend_.lora({.x = x,
                 .y = y,
                 .row_slot = step_adapters_,
                 .factors = table,
                 .scratch = lora_scratch_.f32(),
                 .n = n,
                 .in = in,
                 .out = out,
                 .n_slots = adapter_slots(),
                 .max_rank = max_lora_rank_});
}

// Each layer's matrices (the backend's bound views) and small tensors (copied by `host`).
Status Model::bind_layers(HostCopies& host) {
  std::unordered_map<std::string_view, const TensorView*> bound;
  for (const TensorView& t : weights_->tensors()) bound.emplace(t.name, &t);
  auto find = [&](const std::string& name) -> const TensorView* {
    const auto it = bound.find(name);
    return it == bound.end() ? nullptr : it->second;
  };
  token_embd_ = find("token_embd.weight");
  output_ = find("output.weight");
  if (output_ == nullptr) output_ = token_embd_;  // tied embeddings
  host.add_vector("output_norm.weight", &output_norm_.weight);
  host.add_vector("output_norm.bias", &output_norm_.bias);
  host.add_vector("output.bias", &output_bias_);
  const ModelConfig& rc = rank_config_;
  layers_.resize(static_cast<size_t>(config_.n_layers));
  for (int i = 0; i < config_.n_layers; ++i) {
    Layer& l = layers_[static_cast<size_t>(i)];
    const std::string p = fmt::format("blk.{}.", i);
    l.attn_q = find(p + "attn_q.weight");
    l.attn_k = find(p + "attn_k.weight");
    l.attn_v = find(p + "attn_v.weight");
    l.attn_output = find(p + "attn_output.weight");
    l.ffn_gate = find(p + "ffn_gate.weight");
    if (rc.expert_layer(i)) {
      l.router = find(p + "ffn_gate_inp.weight");
      host.add_vector(p + "exp_probs_b.bias", &l.router_bias);
      l.experts.resize(static_cast<size_t>(rc.n_experts));
      for (int e = 0; e < rc.n_experts; ++e) {
        Layer::Expert& x = l.experts[static_cast<size_t>(e)];
        x.gate = find(fmt::format("{}ffn_gate.{}.weight", p, e));
        x.up = find(fmt::format("{}ffn_up.{}.weight", p, e));
        x.down = find(fmt::format("{}ffn_down.{}.weight", p, e));
      }
      l.shared = {find(p + "ffn_gate_shexp.weight"), find(p + "ffn_up_shexp.weight"), find(p + "ffn_down_shexp.weight")};
      l.shared_gate = find(p + "ffn_gate_inp_shexp.weight");
    }
    l.ffn_up = find(p + "ffn_up.weight");
    l.ffn_down = find(p + "ffn_down.weight");
    host.add_vector(p + "attn_norm.weight", &l.attn_norm.weight);
    host.add_vector(p + "attn_norm.bias", &l.attn_norm.bias);
    host.add_vector(p + "ffn_norm.weight", &l.ffn_norm.weight);
    host.add_vector(p + "ffn_norm.bias", &l.ffn_norm.bias);
    host.add_vector(p + "post_attention_norm.weight", &l.post_attention_norm.weight);
    host.add_vector(p + "post_ffw_norm.weight", &l.post_ffw_norm.weight);
    host.add_vector(p + "attn_q.bias", &l.q_bias);
    host.add_vector(p + "attn_k.bias", &l.k_bias);
    host.add_vector(p + "attn_v.bias", &l.v_bias);
    host.add_vector(p + "attn_q_norm.weight", &l.q_norm);
    host.add_vector(p + "attn_k_norm.weight", &l.k_norm);
    host.add_vector(p + "attn_output.bias", &l.output_bias);
    host.add_vector(p + "ffn_gate.bias", &l.gate_bias);
    host.add_vector(p + "ffn_up.bias", &l.up_bias);
    host.add_vector(p + "ffn_down.bias", &l.down_bias);
    std::vector<std::pair<size_t, int64_t>> seen;
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "attn_q.perm", rc.dim, seen, &l.q_perm));
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "attn_k.perm", rc.dim, seen, &l.k_perm));
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "attn_v.perm", rc.dim, seen, &l.v_perm));
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "attn_output.perm", rc.q_dim(), seen, &l.output_perm));
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "ffn_gate.perm", rc.dim, seen, &l.gate_perm));
    HEARTH_RETURN_IF_ERROR(host.add_perm(p + "ffn_up.perm", rc.dim, seen, &l.up_perm));
  }
  return Status::ok();
}

// Activations for max_batch_tokens_ rows (xp_ only when some matrix is stored permuted),
// and the LM head's kLogitChunk rows.
Status Model::allocate_activations(bool permuted) {
  const ModelConfig& rc = rank_config_;
  const size_t n = static_cast<size_t>(max_batch_tokens_);
  auto act = [&](int64_t width, BackendBuffer& buf) -> Status {
    HEARTH_ASSIGN_OR_RETURN(buf, backend_.alloc(n * static_cast<size_t>(width) * sizeof(float)));
    return Status::ok();
  };
  HEARTH_RETURN_IF_ERROR(act(rc.dim, x_));
  HEARTH_RETURN_IF_ERROR(act(std::max(rc.dim, rc.q_dim()), xn_));
  HEARTH_RETURN_IF_ERROR(act(rc.q_dim(), q_));
  HEARTH_RETURN_IF_ERROR(act(rc.kv_dim(), k_));
  HEARTH_RETURN_IF_ERROR(act(rc.kv_dim(), v_));
  HEARTH_RETURN_IF_ERROR(act(rc.q_dim(), att_));
  // Every token's rows for each of its experts.
  const int64_t routed = std::max(1, rc.n_experts_used);
  const int64_t ffn_rows = std::max<int64_t>({rc.hidden_dim * routed, rc.shared_expert_dim, rc.dense_hidden_dim});
  HEARTH_RETURN_IF_ERROR(act(ffn_rows, gate_));
  HEARTH_RETURN_IF_ERROR(act(ffn_rows, up_));
  if (rc.shared_expert_dim > 0) {
    HEARTH_RETURN_IF_ERROR(act(rc.dim, shared_out_));
    HEARTH_RETURN_IF_ERROR(act(1, shared_logit_));
  }
  if (rc.n_experts > 0) {
    HEARTH_RETURN_IF_ERROR(act(rc.n_experts, router_logits_));
    HEARTH_RETURN_IF_ERROR(act(routed, route_ids_));  // int32, the size of a float
    HEARTH_RETURN_IF_ERROR(act(routed, route_weights_));
    HEARTH_RETURN_IF_ERROR(act(2 * routed, moe_index_));
    HEARTH_RETURN_IF_ERROR(act(rc.dim * routed, moe_in_));
    HEARTH_RETURN_IF_ERROR(act(rc.dim * routed, moe_out_));
    host_route_ids_.resize(n * static_cast<size_t>(routed));
    host_moe_index_.resize(2 * n * static_cast<size_t>(routed));
    expert_rows_.resize(static_cast<size_t>(rc.n_experts) + 1);
    expert_next_.resize(static_cast<size_t>(rc.n_experts));
  }
  if (permuted) HEARTH_RETURN_IF_ERROR(act(std::max(rc.dim, rc.q_dim()), xp_));
  if (rc.residual != Residual::kSequential) HEARTH_RETURN_IF_ERROR(act(rc.dim, proj_));
  HEARTH_ASSIGN_OR_RETURN(logits_in_, backend_.alloc(kLogitChunk * static_cast<size_t>(config_.dim) * sizeof(float)));
  HEARTH_ASSIGN_OR_RETURN(logits_, backend_.alloc(kLogitChunk * static_cast<size_t>(config_.vocab_size) * sizeof(float)));
  return Status::ok();
}

Status Model::check(const ModelInput& input, const KvCache& cache) const {
  const KvCacheConfig& kc = cache.config();
  HEARTH_RETURN_IF_ERROR(model_input_validate(input, {config_.vocab_size, max_batch_tokens_, config_.max_context,
                                                      kc.n_blocks, kc.block_size, adapter_slots()}));
  for (size_t s = 0; s + 1 < input.query_start.size() && !input.adapters.empty(); ++s) {
    const int32_t a = input.adapters[static_cast<size_t>(input.query_start[s])];
    if (a >= 0 && !lora_loaded_[static_cast<size_t>(a)]) {
      return make_error(ErrorCode::kInvalidArgument, "sequence {} runs with adapter slot {}, which holds none", s, a);
    }
  }
  if (kc.kv_dim != rank_config_.kv_dim() || kc.n_layers != rank_config_.n_layers) {
    return make_error(ErrorCode::kInvalidArgument, "the KV cache holds {} layers of {} values, the model {} of {}",
                      kc.n_layers, kc.kv_dim, rank_config_.n_layers, rank_config_.kv_dim());
  }
  return Status::ok();
}

Status Model::forward(const ModelInput& input, KvCache& cache, float* logits, float* hidden) {
  const int64_t vocab = rank_config_.vocab_size;
  return run(input, cache, logits != nullptr, hidden, [&](int64_t i0, int64_t m) {
    backend_.read(logits_, 0, logits + i0 * vocab, static_cast<size_t>(m * vocab) * sizeof(float));
  });
}

Status Model::forward_sampled(const ModelInput& input, KvCache& cache, std::span<const SampleRow> rows,
                                   std::span<SampledRow> out, float* hidden) {
  if (rows.size() != input.logit_rows.size() || out.size() != rows.size()) {
    return make_error(ErrorCode::kInternal, "{} sample rows and {} results for {} logit rows", rows.size(), out.size(),
                      input.logit_rows.size());
  }
  const int64_t vocab = rank_config_.vocab_size;
  return run(input, cache, true, hidden, [&](int64_t i0, int64_t m) {
    backend_.sample(logits_.f32(), vocab, rows.subspan(static_cast<size_t>(i0), static_cast<size_t>(m)),
                    out.subspan(static_cast<size_t>(i0), static_cast<size_t>(m)));
  });
}

void Model::norm(const float* x, const Norm& w, int64_t n, float* out) {
  const ModelConfig& c = rank_config_;
  if (c.norm == NormKind::kLayer) {
    backend_.layer_norm(x, w.weight, w.bias, n, c.dim, c.norm_eps, out);
  } else {
    backend_.rms_norm(x, w.weight, n, c.dim, c.norm_eps, out);
  }
}

void Model::add_norm(float* x, const float* delta, const Norm& w, int64_t n, float* out) {
  const ModelConfig& c = rank_config_;
  if (c.norm == NormKind::kLayer) {
    backend_.add(x, delta, n * c.dim);
    backend_.layer_norm(x, w.weight, w.bias, n, c.dim, c.norm_eps, out);
  } else {
    backend_.add_rms_norm(x, delta, w.weight, n, c.dim, c.norm_eps, out);
  }
}

void Model::attention_block(int32_t li, const StepInput& step, KvCache& cache) {
  const KvCacheConfig& kc = cache.config();
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const Layer& l = layers_[static_cast<size_t>(li)];
  const int64_t n = step.n_tokens;
  float* q = q_.f32();
  float* k = k_.f32();
  float* v = v_.f32();
  const MatmulTarget qkv[] = {{l.attn_q, q}, {l.attn_k, k}, {l.attn_v, v}};  // [n, q_dim], [n, kv_dim] x 2
  const int32_t* const qkv_perms[] = {l.q_perm, l.k_perm, l.v_perm};
  permuted_matmuls(xn_.f32(), n, c.dim, qkv, qkv_perms);
  adapt(li, LoraTarget::kQ, xn_.f32(), c.dim, q, c.q_dim(), n);
  adapt(li, LoraTarget::kK, xn_.f32(), c.dim, k, c.kv_dim(), n);
  adapt(li, LoraTarget::kV, xn_.f32(), c.dim, v, c.kv_dim(), n);
  if (l.q_bias != nullptr) {
    be.add_bias(q, l.q_bias, n, c.q_dim());
    be.add_bias(k, l.k_bias, n, c.kv_dim());
    be.add_bias(v, l.v_bias, n, c.kv_dim());
  }
  if (l.q_norm != nullptr) {  // each head normalised on its own
    be.rms_norm(q, l.q_norm, n * c.n_heads, c.head_dim, c.norm_eps, q);
    be.rms_norm(k, l.k_norm, n * c.n_kv_heads, c.head_dim, c.norm_eps, k);
  }
  const bool windowed = c.windowed(li);
  const float* inv_freq = windowed && local_inv_freq_buf_.data() != nullptr ? local_inv_freq_buf_.f32()
                                                                            : inv_freq_buf_.f32();
  be.rope_kv_store(q, k, c.n_heads, c.rotary(), step.positions, inv_freq, c.rope_style,
                   {.k = k,
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
                .out = att_.f32(),
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
                .scale = c.attention_scale > 0.0f ? c.attention_scale
                                                  : 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                .softcap = c.attn_softcap,
                .sliding_window = windowed ? c.sliding_window : 0,
                .kv_dtype = kc.dtype,
                .max_keys = windowed ? std::min(step.max_keys, c.sliding_window) : step.max_keys});
}

void Model::moe_block(int32_t li, const float* in, int64_t n, float* out) {
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const Layer& l = layers_[static_cast<size_t>(li)];
  const int32_t k = c.n_experts_used, n_experts = c.n_experts;
  const int64_t dim = c.dim, ffn = c.hidden_dim, routed = n * k;
  be.matmul(*l.router, in, n, router_logits_.f32());  // [n, n_experts]
  auto* ids = static_cast<int32_t*>(route_ids_.data());
  const kernels::MoeRouting routing{n_experts, k, c.moe_normalize, c.router_sigmoid, l.router_bias, c.routed_scale};
  be.moe_route(router_logits_.f32(), n, routing, ids, route_weights_.f32());
  // The grouping is decided on the host: which gathered row each (token, expert) gets.
  be.read(route_ids_, 0, host_route_ids_.data(), static_cast<size_t>(routed) * sizeof(int32_t));
  std::fill(expert_rows_.begin(), expert_rows_.end(), 0);
  for (int64_t i = 0; i < routed; ++i) ++expert_rows_[static_cast<size_t>(host_route_ids_[static_cast<size_t>(i)]) + 1];
  for (int32_t e = 0; e < n_experts; ++e) expert_rows_[static_cast<size_t>(e) + 1] += expert_rows_[static_cast<size_t>(e)];
  // A counting sort: each pair takes the next row of its expert's run, so an expert's
  // tokens stay in order.
  int32_t* source = host_moe_index_.data();        // [routed]: the token of each gathered row
  int32_t* row_of = host_moe_index_.data() + routed;  // [n, k]: the gathered row of each (token, expert)
  std::copy(expert_rows_.begin(), expert_rows_.end() - 1, expert_next_.begin());
  for (int64_t i = 0; i < routed; ++i) {
    const int32_t r = expert_next_[static_cast<size_t>(host_route_ids_[static_cast<size_t>(i)])]++;
    source[r] = static_cast<int32_t>(i / k);
    row_of[i] = r;
  }
  be.write(moe_index_, 0, host_moe_index_.data(), static_cast<size_t>(2 * routed) * sizeof(int32_t));
  if (l.shared.gate != nullptr) {
    // The shared expert, before `out` (which may be `in`) is written.
    gated_ffn(*l.shared.gate, *l.shared.up, *l.shared.down, in, n, c.shared_expert_dim, shared_out_.f32());
    if (l.shared_gate != nullptr) {
      be.matmul(*l.shared_gate, in, n, shared_logit_.f32());  // [n, 1]
      be.sigmoid_gate_rows(shared_out_.f32(), shared_logit_.f32(), n, dim);
    }
  }
  const auto* index = static_cast<const int32_t*>(moe_index_.data());
  float* xg = moe_in_.f32();
  float* gate = gate_.f32();
  float* up = up_.f32();
  float* yg = moe_out_.f32();
  be.gather_rows(in, index, routed, dim, xg);  // [routed, dim], expert by expert
  for (int32_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = expert_rows_[static_cast<size_t>(e)], m = expert_rows_[static_cast<size_t>(e) + 1] - r0;
    if (m == 0) continue;  // an expert no token chose is not read
    const Layer::Expert& x = l.experts[static_cast<size_t>(e)];
    const MatmulTarget gate_up[] = {{x.gate, gate + r0 * ffn}, {x.up, up + r0 * ffn}};
    be.matmuls(xg + r0 * dim, m, gate_up);
  }
  gated_activation(gate, up, routed * ffn);
  for (int32_t e = 0; e < n_experts; ++e) {
    const int64_t r0 = expert_rows_[static_cast<size_t>(e)], m = expert_rows_[static_cast<size_t>(e) + 1] - r0;
    if (m > 0) be.matmul(*l.experts[static_cast<size_t>(e)].down, gate + r0 * ffn, m, yg + r0 * dim);
  }
  be.moe_combine(yg, index + routed, route_weights_.f32(), n, k, dim, out);  // this rank's partial sums
  if (l.shared.gate != nullptr) be.add(out, shared_out_.f32(), n * dim);
}

void Model::gated_activation(float* gate, const float* up, int64_t n) {
  const ModelConfig& c = rank_config_;
  if (c.activation == Activation::kSilu) {
    backend_.swiglu(gate, up, n, gate);
  } else {
    backend_.gelu(gate, up, n, c.activation == Activation::kGeluTanh, gate);
  }
}

void Model::gated_ffn(const TensorView& gate, const TensorView& up, const TensorView& down, const float* in,
                           int64_t n, int64_t ffn, float* out) {
  const MatmulTarget gate_up[] = {{&gate, gate_.f32()}, {&up, up_.f32()}};  // [n, ffn] each
  backend_.matmuls(in, n, gate_up);
  gated_activation(gate_.f32(), up_.f32(), n * ffn);
  backend_.matmul(down, gate_.f32(), n, out);
}

void Model::ffn_block(int32_t li, const float* in, int64_t n, float* out) {
  const ModelConfig& c = rank_config_;
  if (c.expert_layer(li)) {
    moe_block(li, in, n, out);
    return;
  }
  Backend& be = backend_;
  const Layer& l = layers_[static_cast<size_t>(li)];
  const int64_t ffn = c.ffn_dim(li);
  float* gate = gate_.f32();
  float* up = up_.f32();
  if (c.gated_ffn) {
    const MatmulTarget gate_up[] = {{l.ffn_gate, gate}, {l.ffn_up, up}};  // [n, ffn] each
    const int32_t* const gate_up_perms[] = {l.gate_perm, l.up_perm};
    permuted_matmuls(in, n, c.dim, gate_up, gate_up_perms);
    adapt(li, LoraTarget::kGate, in, c.dim, gate, ffn, n);
    adapt(li, LoraTarget::kUp, in, c.dim, up, ffn, n);
    if (l.gate_bias != nullptr) be.add_bias(gate, l.gate_bias, n, ffn);
    if (l.up_bias != nullptr) be.add_bias(up, l.up_bias, n, ffn);
    if (c.activation == Activation::kSilu) {
      be.swiglu_matmul(*l.ffn_down, gate, up, n, out);  // [n, dim], this rank's partial sum
    } else {
      gated_activation(gate, up, n * ffn);
      be.matmul(*l.ffn_down, gate, n, out);
    }
  } else {
    const MatmulTarget up_only[] = {{l.ffn_up, gate}};  // [n, ffn]
    const int32_t* const up_perms[] = {l.up_perm};
    permuted_matmuls(in, n, c.dim, up_only, up_perms);
    adapt(li, LoraTarget::kUp, in, c.dim, gate, ffn, n);
    if (l.up_bias != nullptr) be.add_bias(gate, l.up_bias, n, ffn);
    be.gelu(gate, nullptr, n * ffn, c.activation == Activation::kGeluTanh, gate);
    be.matmul(*l.ffn_down, gate, n, out);
  }
  adapt(li, LoraTarget::kDown, gate, ffn, out, c.dim, n);
}

Status Model::layer(int32_t li, const StepInput& step, KvCache& cache, const Norm* next_norm) {
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const Layer& l = layers_[static_cast<size_t>(li)];
  const int64_t n = step.n_tokens;
  const int64_t dim = c.dim, q_dim = c.q_dim();
  float* x = x_.f32();
  float* xn = xn_.f32();
  const MatmulTarget output[] = {{l.attn_output, xn}};  // [n, dim], this rank's partial sum
  const int32_t* const output_perms[] = {l.output_perm};
  attention_block(li, step, cache);
  if (c.residual == Residual::kSequential) {
    permuted_matmuls(att_.f32(), n, q_dim, output, output_perms);
    adapt(li, LoraTarget::kOutput, att_.f32(), q_dim, xn, dim, n);
    HEARTH_RETURN_IF_ERROR(comm_.all_reduce_sum(xn, n * dim, be.queue()));
    if (l.output_bias != nullptr) be.add_bias(xn, l.output_bias, n, dim);
    if (c.sandwich_norm) norm(xn, l.post_attention_norm, n, xn);
    add_norm(x, xn, l.ffn_norm, n, xn);  // the residual add fused with the FFN's norm
    ffn_block(li, xn, n, xn);
  } else {
    // Attention and the FFN both read x before either is added: their partial sums are
    // added first, so that the layer needs one all-reduce.
    if (c.residual == Residual::kParallel) norm(x, l.ffn_norm, n, xn);  // else the shared norm is there
    ffn_block(li, xn, n, xn);
    const MatmulTarget proj[] = {{l.attn_output, proj_.f32()}};
    permuted_matmuls(att_.f32(), n, q_dim, proj, output_perms);
    adapt(li, LoraTarget::kOutput, att_.f32(), q_dim, proj_.f32(), dim, n);
    be.add(xn, proj_.f32(), n * dim);
  }
  HEARTH_RETURN_IF_ERROR(comm_.all_reduce_sum(xn, n * dim, be.queue()));
  // The biases of the projections whose partial sums were reduced, added once.
  if (c.residual != Residual::kSequential && l.output_bias != nullptr) be.add_bias(xn, l.output_bias, n, dim);
  if (l.down_bias != nullptr) be.add_bias(xn, l.down_bias, n, dim);
  if (c.sandwich_norm) norm(xn, l.post_ffw_norm, n, xn);
  if (next_norm != nullptr) {
    add_norm(x, xn, *next_norm, n, xn);
  } else {
    be.add(x, xn, n * dim);
  }
  return Status::ok();
}

void Model::permuted_matmuls(const float* x, int64_t n, int64_t cols, std::span<const MatmulTarget> targets,
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

Status Model::embed(const ModelInput& input, KvCache& cache, float* hidden) {
  HEARTH_RETURN_IF_ERROR(check(input, cache));
  const StepInput step = backend_.upload(input);
  backend_.embedding(*token_embd_, step.tokens, step.n_tokens, x_.f32());
  if (rank_config_.embedding_scale > 0.0f) {
    backend_.scale(x_.f32(), step.n_tokens * rank_config_.dim, rank_config_.embedding_scale);
  }
  backend_.read(x_, 0, hidden, static_cast<size_t>(step.n_tokens * rank_config_.dim) * sizeof(float));
  return Status::ok();
}

Status Model::run_layer(const ModelInput& input, KvCache& cache, int32_t layer_index, float* hidden) {
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
  step_adapters_ = input.has_adapters() ? step.adapters : nullptr;
  const int64_t n = step.n_tokens, dim = rank_config_.dim;
  const size_t bytes = static_cast<size_t>(n * dim) * sizeof(float);
  backend_.write(x_, 0, hidden, bytes);
  norm(x_.f32(), layers_[static_cast<size_t>(layer_index)].attn_norm, n, xn_.f32());
  HEARTH_RETURN_IF_ERROR(layer(layer_index, step, cache, nullptr));
  backend_.read(x_, 0, hidden, bytes);
  return Status::ok();
}

template <typename OnLogits>
Status Model::run(const ModelInput& input, KvCache& cache, bool lm_head, float* hidden, OnLogits&& on_logits) {
  HEARTH_RETURN_IF_ERROR(check(input, cache));
  const ModelConfig& c = rank_config_;
  Backend& be = backend_;
  const StepInput step = be.upload(input);
  step_adapters_ = input.has_adapters() ? step.adapters : nullptr;
  const int64_t n = step.n_tokens;
  const int64_t dim = c.dim;
  float* x = x_.f32();
  float* xn = xn_.f32();

  be.embedding(*token_embd_, step.tokens, n, x);
  if (c.embedding_scale > 0.0f) be.scale(x, n * dim, c.embedding_scale);
  norm(x, layers_[0].attn_norm, n, xn);
  for (int32_t li = 0; li < c.n_layers; ++li) {
    const Norm* next_norm = li + 1 < c.n_layers ? &layers_[static_cast<size_t>(li) + 1].attn_norm : nullptr;
    HEARTH_RETURN_IF_ERROR(layer(li, step, cache, next_norm));
  }

  float* rows = logits_in_.f32();
  // The hidden rows embeddings pool: gathered and normalised as the LM head would see
  // them, in chunks of its input buffer.
  if (hidden != nullptr) {
    for (int64_t i0 = 0; i0 < step.n_hidden_rows; i0 += kLogitChunk) {
      const int64_t m = std::min<int64_t>(kLogitChunk, step.n_hidden_rows - i0);
      be.gather_rows(x, step.hidden_rows + i0, m, dim, rows);
      norm(rows, output_norm_, m, rows);
      be.read(logits_in_, 0, hidden + i0 * dim, static_cast<size_t>(m * dim) * sizeof(float));
    }
  }
  if (!lm_head) return Status::ok();  // a rank that does not sample
  const auto n_logits = static_cast<int64_t>(step.n_logit_rows);
  // Gather the rows whose logits are wanted, normalise, project onto the vocabulary in
  // chunks of the logits buffer.
  for (int64_t i0 = 0; i0 < n_logits; i0 += kLogitChunk) {
    const int64_t m = std::min<int64_t>(kLogitChunk, n_logits - i0);
    be.gather_rows(x, step.logit_rows + i0, m, dim, rows);
    norm(rows, output_norm_, m, rows);
    be.matmul(*output_, rows, m, logits_.f32());  // [m, vocab]
    if (output_bias_ != nullptr) be.add_bias(logits_.f32(), output_bias_, m, c.vocab_size);
    if (c.final_softcap > 0.0f) be.softcap(logits_.f32(), m * c.vocab_size, c.final_softcap);
    on_logits(i0, m);
  }
  return Status::ok();
}

}  // namespace hearth
