// Measuring what quantization costs: perplexity over a text and, against a reference
// model, the KL divergence and top-1 agreement of every scored position's next-token
// distribution, each with a 95% confidence interval.
//
// The text is cut into chunks of `ctx` tokens, each starting with BOS, and the second
// half of every chunk is scored (the first half is context), as llama.cpp's perplexity
// tool does, so figures are comparable with it. KL(P_ref || P) is summed over the whole
// vocabulary in double. Intervals are mean ± 1.96 standard errors over the scored
// positions (perplexity's through exp of its mean log-likelihood's). Models run through
// the engine's own forward pass (Model on the CPU backend), as served.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/model_config.h"
#include "common/status.h"
#include "common/tensor.h"
#include "common/token.h"

namespace hearth {
class Backend;
class Model;
class KvCache;
}  // namespace hearth

namespace hearth::quant {

// One model ready to give the logits of every position of a chunk.
class SequenceScorer {
 public:
  // Binds `tensors` (laid out as `layout`) on a CPU backend of `threads` threads for
  // chunks of up to `ctx` tokens.
  static Result<std::unique_ptr<SequenceScorer>> create(const ModelConfig& config, std::span<const TensorView> tensors,
                                                        std::string_view layout, int32_t ctx, int threads);
  ~SequenceScorer();
  // out = the logits after each token of `tokens`, [tokens.size(), vocab].
  Status logits(std::span<const TokenId> tokens, std::vector<float>& out);
  int32_t vocab_size() const { return vocab_; }

 private:
  SequenceScorer() = default;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvCache> cache_;
  std::vector<int32_t> blocks_;
  int32_t vocab_ = 0;
};

struct EvalOptions {
  int32_t ctx = 512;        // tokens per chunk
  int32_t max_chunks = 0;   // 0: every whole chunk of the text
  TokenId bos = -1;         // each chunk's first token (-1: the text's own)
};

struct Estimate {
  double mean = 0.0;
  double low = 0.0;   // 95% interval
  double high = 0.0;
};

struct EvalResult {
  int32_t chunks = 0;
  int32_t ctx = 0;
  int64_t scored = 0;           // positions scored
  Estimate perplexity;
  bool has_reference = false;
  Estimate reference_perplexity;
  Estimate kl;                  // mean KL(P_ref || P) in nats
  double kl_max = 0.0;
  Estimate top1;                // fraction of positions whose argmax agrees
  double seconds = 0.0;
};

// Called after each chunk with the chunks done and the total.
using ChunkProgress = std::function<void(int32_t done, int32_t total)>;

// Scores `tokens` with `model` and, when given, compares every position with
// `reference` (same vocabulary). kInvalidArgument when the text is shorter than one
// chunk (the message gives both counts) or the vocabularies differ.
Result<EvalResult> evaluate(SequenceScorer& model, SequenceScorer* reference, std::span<const TokenId> tokens,
                            const EvalOptions& options, const ChunkProgress& progress = {});

}  // namespace hearth::quant
