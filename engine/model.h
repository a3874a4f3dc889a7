// LlamaModel: the forward pass of the Llama family (Llama 2/3, Mistral, Qwen2,
// TinyLlama, SmolLM), written once against the Backend interface.
//
// A forward call runs a batch of tokens from one or more sequences (prefill chunks and
// decode steps alike): every matmul covers all tokens of the batch, attention runs per
// sequence over its blocks of the paged KV cache. Weights are used in place (any DType
// the backend supports; quantized ones are dequantized inside the matmul); only the
// small vectors (norm weights, biases, RoPE frequencies) are kept as float32 copies.
// Not thread-safe: one caller (the engine's step loop) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/token.h"
#include "engine/backend.h"
#include "engine/kv_cache.h"

namespace hearth {

// The tokens of one sequence inside a batch.
struct BatchSequence {
  int32_t token_begin = 0;  // first row of this sequence in ForwardBatch::tokens
  int32_t n_tokens = 0;
  const KvSequence* kv = nullptr;  // blocks must cover every position written
};

struct ForwardBatch {
  std::span<const TokenId> tokens;          // [n_tokens]
  std::span<const int32_t> positions;       // [n_tokens] absolute position of each token
  std::span<const BatchSequence> sequences;  // cover the rows, in order
  std::span<const int32_t> logit_rows;      // rows whose logits are wanted
};

class LlamaModel {
 public:
  // Binds the weights (tensors under canonical names, checked against `config`) and
  // allocates activations for up to `max_batch_tokens` tokens per forward call.
  static Result<std::unique_ptr<LlamaModel>> create(const ModelConfig& config, std::span<const TensorView> tensors,
                                                    Backend& backend, int32_t max_batch_tokens);

  const ModelConfig& config() const { return config_; }
  int32_t max_batch_tokens() const { return max_batch_tokens_; }

  // Runs the batch, writes K/V of every token into `cache` and the logits of
  // batch.logit_rows into `logits` ([logit_rows.size(), vocab_size], host memory).
  // Fails on malformed batches (ids out of the vocabulary, too many tokens, positions
  // past the blocks) without touching the cache.
  Status forward(const ForwardBatch& batch, KvCache& cache, float* logits);

  // The per-pair inverse RoPE frequencies ([head_dim / 2]) this model uses.
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  struct Layer {
    const TensorView* attn_q = nullptr;
    const TensorView* attn_k = nullptr;
    const TensorView* attn_v = nullptr;
    const TensorView* attn_output = nullptr;
    const TensorView* ffn_gate = nullptr;
    const TensorView* ffn_up = nullptr;
    const TensorView* ffn_down = nullptr;
    const float* attn_norm = nullptr;  // into vectors_
    const float* ffn_norm = nullptr;
    const float* q_bias = nullptr;
    const float* k_bias = nullptr;
    const float* v_bias = nullptr;
  };

  LlamaModel(const ModelConfig& config, Backend& backend) : config_(config), backend_(backend) {}
  Status validate(const ForwardBatch& batch, const KvCache& cache) const;

  ModelConfig config_;
  Backend& backend_;
  int32_t max_batch_tokens_ = 0;
  std::vector<TensorView> tensors_;  // own copies of the views (names, shapes); data is borrowed
  const TensorView* token_embd_ = nullptr;
  const TensorView* output_ = nullptr;
  const float* output_norm_ = nullptr;
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  BackendBuffer vectors_;  // norms and biases as float32
  BackendBuffer inv_freq_buf_;
  // Activations, [max_batch_tokens, width] each.
  BackendBuffer x_, xn_, q_, k_, v_, att_, gate_, up_;
  // Final-norm rows and logits, kLogitChunk rows at a time.
  static constexpr int64_t kLogitChunk = 16;
  BackendBuffer logits_in_, logits_;
  std::vector<int32_t> slots_;
  std::vector<kernels::AttentionParams> attention_params_;  // one per sequence of the batch
};

}  // namespace hearth
