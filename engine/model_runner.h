// ModelRunner: runs one step's ModelInput through a rank's model and KV cache and
// returns the logits rows it asked for. What the driver calls once per step; on the
// other ranks of a group (later) it is all there is, fed the input rank 0 broadcast.
// Borrows the model and cache; not thread-safe (the step loop's).
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/model_input.h"

namespace hearth {

class ModelRunner {
 public:
  ModelRunner(LlamaModel& model, KvCache& cache) : model_(model), cache_(cache) {}

  // The logits of input.logit_rows, [logit_rows.size(), vocab_size], valid until the
  // next run. A bad input fails alone (model_input_validate) and leaves the cache as it was.
  Result<std::span<const float>> run(const ModelInput& input);

  LlamaModel& model() { return model_; }
  KvCache& cache() { return cache_; }
  int32_t vocab_size() const { return model_.config().vocab_size; }
  int32_t max_batch_tokens() const { return model_.max_batch_tokens(); }

 private:
  LlamaModel& model_;
  KvCache& cache_;
  std::vector<float> logits_;  // grows to the largest step once
};

}  // namespace hearth
