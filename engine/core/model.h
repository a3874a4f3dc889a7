// Model: the forward pass of the decoder-only families hearth runs (Llama 2/3,
// Mistral, Qwen2/3, TinyLlama, SmolLM, GPT-J, GPT-NeoX, Gemma 2/3, and the mixtures of
// experts Mixtral, Qwen2-MoE, Qwen3-MoE), written once against the Backend interface.
// What differs between families is ModelConfig data: RMSNorm or LayerNorm, sequential
// or parallel residual, gated SiLU/GELU or plain GELU FFN, full or partial rotary, q/k
// norms, biases, block output norms, soft-capping, sliding-window layers, routed and
// shared experts.
//
// A forward call runs one step's ModelInput: tokens of one or more sequences (prefill
// chunks and decode steps alike); every matmul covers all tokens of the step, attention
// runs per sequence over its blocks of the paged KV cache. The backend binds the weights
// (bind_weights) and uploads the input; the model reads nothing else. Quantized weights
// are dequantized inside the matmul; only the small vectors (norm weights, biases, RoPE
// frequencies) are kept as float32 copies. A model is one rank's: its heads and FFN are
// its share (model_rank_config), and the partial sums of the attention output and FFN
// down projections are all-reduced over the group's Communicator.
// Not thread-safe: one caller (the engine's step loop) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/lora.h"
#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/token.h"
#include "engine/core/backend.h"
#include "engine/core/communicator.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model_input.h"

namespace hearth {

struct ModelOptions {
  // How the tensors are laid out (kLayoutPlain, kLayoutCpuR16); empty: whichever their
  // dtypes show (cpu-r16 when any is row-interleaved).
  std::string_view layout;
  // The group this rank belongs to; null: a single rank.
  Communicator* comm = nullptr;
  // LoRA: how many adapters the model holds at once (slots for set_adapter) and the
  // largest rank one may have; 0: none.
  int32_t max_adapters = 0;
  int32_t max_lora_rank = 0;
};

// The config one rank of `size` computes: its share of the query and KV heads and of
// the FFN (the hidden size and vocabulary are whole). kUnsupported when they do not
// divide evenly.
Result<ModelConfig> model_rank_config(const ModelConfig& config, int rank, int size);

class HostCopies;  // model.cpp: the small tensors a model copies to its backend

class Model {
 public:
  // Binds the weights (this rank's tensors under canonical names, checked against its
  // share of `config`) and allocates activations for up to `max_batch_tokens` tokens per
  // forward call.
  static Result<std::unique_ptr<Model>> create(const ModelConfig& config, std::span<const TensorView> tensors,
                                                    Backend& backend, int32_t max_batch_tokens,
                                                    const ModelOptions& options = {});

  // The whole model's config; rank_config() is this rank's share.
  const ModelConfig& config() const { return config_; }
  const ModelConfig& rank_config() const { return rank_config_; }
  int32_t max_batch_tokens() const { return max_batch_tokens_; }
  Backend& backend() const { return backend_; }

  // Runs the step, writes K/V of every token into `cache` and the logits of
  // input.logit_rows into `logits` ([logit_rows.size(), vocab_size], host memory).
  // Fails on malformed inputs (model_input_validate: ids out of the vocabulary, too
  // many tokens, positions past the blocks) without touching the cache.
  // Without `logits` (null) the step stops after the last layer: ranks 1..tp-1 of a
  // group, which do not sample, run no LM head. With `hidden`, the final hidden states
  // of input.hidden_rows (after the output norm) go there ([hidden_rows.size(), dim],
  // host memory): what embedding requests pool.
  Status forward(const ModelInput& input, KvCache& cache, float* logits, float* hidden = nullptr);
  // forward with the sampling on the backend (Backend::samples): rows[i] samples logit
  // row i, the tokens come back in `out` and the logits stay on the device.
  Status forward_sampled(const ModelInput& input, KvCache& cache, std::span<const SampleRow> rows,
                         std::span<SampledRow> out, float* hidden = nullptr);
  // forward's checks alone: whether `input` can run on `cache`.
  Status check(const ModelInput& input, const KvCache& cache) const;

  // The forward pass a layer at a time, for quantization's calibration (quant/): the
  // hidden states the pass starts from ([n_tokens, dim], host memory), and one layer
  // run on them in place, writing its K/V into `cache`. Single-rank models only (a
  // shard's partial sums would need its group).
  Status embed(const ModelInput& input, KvCache& cache, float* hidden);
  Status run_layer(const ModelInput& input, KvCache& cache, int32_t layer, float* hidden);

  // LoRA adapters. Slot 0..adapter_slots()-1 runs `adapter` for the rows a ModelInput
  // gives that slot: this rank's share of its factors (B's rows of a column-parallel
  // matrix, A's columns of a row-parallel one) copied to the backend, replacing what the
  // slot held. kInvalidArgument naming the matrix for a target the model lacks (a
  // mixture-of-experts layer's FFN), a shape other than the base matrix's, or a rank
  // above max_lora_rank; the slot is unchanged then. Not while a step runs, and not for a
  // slot a running sequence uses (Driver::uses_adapter): its K/V would mix two adapters.
  // Every rank of a group must hold the same adapters in the same slots.
  Status set_adapter(int32_t slot, const LoraAdapter& adapter);
  void clear_adapter(int32_t slot);
  int32_t adapter_slots() const { return static_cast<int32_t>(lora_slots_.size()); }
  bool adapter_loaded(int32_t slot) const;
  // A nonzero id of what slot `slot` holds (a hash of its factors and scales under a key
  // of this model's), 0 when empty: what keys its prefix-cache blocks apart from the
  // base's and other adapters'.
  uint64_t adapter_id(int32_t slot) const { return adapter_loaded(slot) ? lora_ids_[static_cast<size_t>(slot)] : 0; }

  // The per-pair inverse RoPE frequencies ([head_dim / 2]) this model uses.
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  // The forward pass; with `hidden`, the hidden rows into it; with the LM head,
  // `on_logits(i0, m)` takes logit rows i0..i0+m-1 from logits_. A template (model.cpp), so that a step allocates nothing.
  template <typename OnLogits>
  Status run(const ModelInput& input, KvCache& cache, bool lm_head, float* hidden, OnLogits&& on_logits);

  // A norm's weight and (LayerNorm) bias, as copied to the backend.
  struct Norm {
    const float* weight = nullptr;
    const float* bias = nullptr;
  };

  // Layer `li` on x_ (with xn_ its attention norm): K/V into the cache, x_ advanced;
  // xn_ becomes x_'s norm with `next_norm` (the next layer's attention norm) when given.
  Status layer(int32_t li, const StepInput& step, KvCache& cache, const Norm* next_norm);
  // out = norm(x) per row of dim values (out may be x).
  void norm(const float* x, const Norm& w, int64_t n, float* out);
  // x += delta, then out = norm(x) (out may be delta).
  void add_norm(float* x, const float* delta, const Norm& w, int64_t n, float* out);
  // The attention block from xn_ (this layer's attention norm): q/k/v, K/V into the
  // cache, attention into att_.
  void attention_block(int32_t li, const StepInput& step, KvCache& cache);
  // The feed-forward block of `in` ([n, dim]) into `out` ([n, dim], this rank's partial
  // sum, no down bias); `in` may be `out`.
  void ffn_block(int32_t li, const float* in, int64_t n, float* out);
  // ffn_block of a mixture-of-experts layer: the router picks each token's experts; the
  // tokens are gathered expert by expert, so that each expert's matrices are read once
  // for all its tokens; the experts' rows are combined per token by their weights, and
  // the shared expert's output (times its sigmoid gate) added.
  void moe_block(int32_t li, const float* in, int64_t n, float* out);
  // The gated FFN (SwiGLU or GeGLU) of `in` ([n, dim]) through gate/up/down into `out`
  // ([n, dim]), gate_ and up_ its scratch; `in` may be `out`.
  void gated_ffn(const TensorView& gate, const TensorView& up, const TensorView& down, const float* in, int64_t n,
                 int64_t ffn, float* out);
  // The activation of a gated FFN over n values: gate = act(gate) * up.
  void gated_activation(float* gate, const float* up, int64_t n);

  struct Layer {
    const TensorView* attn_q = nullptr;
    const TensorView* attn_k = nullptr;
    const TensorView* attn_v = nullptr;
    const TensorView* attn_output = nullptr;
    const TensorView* ffn_gate = nullptr;
    const TensorView* ffn_up = nullptr;
    const TensorView* ffn_down = nullptr;
    Norm attn_norm;  // into vectors_
    Norm ffn_norm;   // none with a shared-norm parallel residual
    Norm post_attention_norm;  // sandwich_norm: the blocks' outputs normalised
    Norm post_ffw_norm;
    const float* q_bias = nullptr;
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
    const float* q_norm = nullptr;  // [head_dim], qk_norm
    const float* k_norm = nullptr;
    const float* output_bias = nullptr;
    const float* gate_bias = nullptr;
    const float* up_bias = nullptr;
    const float* down_bias = nullptr;
    // Mixture of experts: the router ([n_experts, dim]), its choice bias ([n_experts],
    // when it has one) and each expert's matrices.
    const TensorView* router = nullptr;
    const float* router_bias = nullptr;
    struct Expert {
      const TensorView* gate = nullptr;
      const TensorView* up = nullptr;
      const TensorView* down = nullptr;
    };
    std::vector<Expert> experts;
    Expert shared;  // the shared expert, when the model has one
    const TensorView* shared_gate = nullptr;  // its gate ([1, dim]), when gated
    // The column order of each matrix stored permuted (act-order GPTQ), into perms_;
    // null: in order. Equal orders share one pointer, so their input is permuted once.
    const int32_t* q_perm = nullptr;
    const int32_t* k_perm = nullptr;
    const int32_t* v_perm = nullptr;
    const int32_t* output_perm = nullptr;
    const int32_t* gate_perm = nullptr;
    const int32_t* up_perm = nullptr;
  };

  // The step's LoRA products of layer li's matrix `t` (input x [n, in], output y [n,
  // out]), when some row of the step has an adapter.
  void adapt(int32_t li, LoraTarget t, const float* x, int64_t in, float* y, int64_t out, int64_t n);
  // The base matrix an adapter's target names in layer li (null: the model has none).
  const TensorView* lora_base(int32_t li, LoraTarget t) const;
  // Where layer li's matrix t's factors of slot 0 are in the LoRA table (slot s: + s), and
  // the table's entries of one slot emptied (on the host).
  size_t lora_entries(int32_t li, LoraTarget t) const;
  void empty_lora_entries(int32_t slot);

  // matmuls of `targets` over x ([n, cols]), each matrix reading x in its column order
  // (perms[i]; null: as it is), permuting x once per distinct order.
  void permuted_matmuls(const float* x, int64_t n, int64_t cols, std::span<const MatmulTarget> targets,
                        std::span<const int32_t* const> perms);

  Model(const ModelConfig& config, Backend& backend, Communicator& comm)
      : config_(config), backend_(backend), comm_(comm) {}
  Status bind_layers(HostCopies& host);
  Status allocate_activations(bool permuted);

  ModelConfig config_;
  ModelConfig rank_config_;
  Backend& backend_;
  Communicator& comm_;
  std::unique_ptr<Communicator> own_comm_;  // the single-rank one, when none was given
  int32_t max_batch_tokens_ = 0;
  std::unique_ptr<BoundWeights> weights_;  // the backend's handles; tensors below point into it
  const TensorView* token_embd_ = nullptr;
  const TensorView* output_ = nullptr;
  Norm output_norm_;
  const float* output_bias_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  BackendBuffer vectors_;  // norms and biases as float32
  BackendBuffer inv_freq_buf_;
  BackendBuffer local_inv_freq_buf_;  // the windowed layers' own (rope_local_theta), when they have one
  BackendBuffer perms_;  // the layers' column orders, int32
  // Activations, [max_batch_tokens, width] each; xp_ (a matmul's input in its matrix's
  // column order) only when some matrix is stored permuted, proj_ (the attention
  // output's partial sum beside the FFN's) only with a parallel residual.
  BackendBuffer x_, xn_, q_, k_, v_, att_, gate_, up_, xp_, proj_;
  // Mixture of experts, [max_batch_tokens * n_experts_used] rows each: the router's
  // logits, each token's experts and weights, the gathered rows' source tokens and each
  // (token, expert)'s row (moe_index_), the gathered inputs and the experts' outputs;
  // and the host's copies of the ids and the index, sized once. With a shared expert,
  // its output ([max_batch_tokens, dim]) and gate logits ([max_batch_tokens]).
  BackendBuffer router_logits_, route_ids_, route_weights_, moe_index_, moe_in_, moe_out_;
  BackendBuffer shared_out_, shared_logit_;
  std::vector<int32_t> host_route_ids_, host_moe_index_;
  std::vector<int32_t> expert_rows_;  // [n_experts + 1]: each expert's first gathered row
  std::vector<int32_t> expert_next_;  // [n_experts]: the grouping's cursor in each expert's run
  // LoRA: each slot's factors (one buffer, null when empty), the table of every (layer,
  // target, slot)'s factors ([n_layers][kLoraTargets][slots], on the host and copied to
  // the backend), the shrunk rows' scratch ([max_batch_tokens, max_lora_rank]), and the
  // running step's row slots (null: no row has an adapter).
  std::vector<BackendBuffer> lora_slots_;
  std::vector<bool> lora_loaded_;
  std::vector<uint64_t> lora_ids_;
  // The ids' key, random per model: adapter blocks of the prefix cache are not found
  // again by a restarted engine (the base's, under a kept chain seed, are).
  uint64_t lora_key_ = 0;
  std::vector<kernels::LoraFactors> lora_table_host_;
  BackendBuffer lora_table_, lora_scratch_;
  int32_t max_lora_rank_ = 0;
  const int32_t* step_adapters_ = nullptr;
  // Final-norm rows and logits, kLogitChunk rows at a time.
  static constexpr int64_t kLogitChunk = 16;
  BackendBuffer logits_in_, logits_;
};

}  // namespace hearth
