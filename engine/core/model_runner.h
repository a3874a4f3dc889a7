// ModelRunner: runs one step's ModelInput through a rank's model and KV cache and
// returns the logits rows it asked for. What the driver calls once per step. In a
// tensor-parallel group, rank 0's runner hands each checked step to a StepSink (the
// group's step channel) before running it, and ranks 1..tp-1 run what they receive
// with run_shard (no logits: only rank 0 samples).
// Borrows the model, cache and sink; not thread-safe (the step loop's).
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "engine/core/kv_cache.h"
#include "engine/core/model.h"
#include "engine/core/model_input.h"

namespace hearth {

// Where rank 0 sends every step before it runs it.
class StepSink {
 public:
  virtual ~StepSink() = default;
  virtual Status publish(const ModelInput& input) = 0;
};

class ModelRunner {
 public:
  ModelRunner(Model& model, KvCache& cache, StepSink* sink = nullptr)
      : model_(model), cache_(cache), sink_(sink) {}

  // The logits of input.logit_rows, [logit_rows.size(), vocab_size], valid until the
  // next run. A bad input fails alone (model_input_validate), before it is published,
  // and leaves the cache as it was. When run and run_sampled return, the step's K/V are
  // in the cache on every backend (a device's stream has run them), so the driver may
  // commit them to a resident cache's tables.
  Result<std::span<const float>> run(const ModelInput& input);
  // Whether the backend samples (Backend::samples): then the driver calls run_sampled.
  bool samples() const { return model_.backend().samples(); }
  // run with the sampling on the backend: rows[i] samples logit row i; the tokens, valid
  // until the next run.
  Result<std::span<const SampledRow>> run_sampled(const ModelInput& input, std::span<const SampleRow> rows);
  // The final hidden states of the latest run's input.hidden_rows, [hidden_rows.size(),
  // dim], valid until the next run.
  std::span<const float> hidden() const { return hidden_view_; }
  // A step of ranks 1..tp-1: the forward pass on this rank's shard, no LM head.
  Status run_shard(const ModelInput& input);

  Model& model() { return model_; }
  KvCache& cache() { return cache_; }
  int32_t vocab_size() const { return model_.config().vocab_size; }
  int32_t max_batch_tokens() const { return model_.max_batch_tokens(); }
  // The latest step's forward pass (collectives included), in nanoseconds.
  uint64_t last_step_ns() const { return last_step_ns_; }

 private:
  Model& model_;
  KvCache& cache_;
  StepSink* sink_;
  std::vector<float> logits_;  // grows to the largest step once
  std::vector<SampledRow> sampled_;
  std::vector<float> hidden_;  // grows to the largest step once
  std::span<const float> hidden_view_;
  // Where the next run's hidden rows go (null when it wants none).
  float* hidden_for(const ModelInput& input);
  uint64_t last_step_ns_ = 0;
};

}  // namespace hearth
