#include "engine/model_runner.h"

namespace hearth {

Result<std::span<const float>> ModelRunner::run(const ModelInput& input) {
  const size_t n = input.logit_rows.size() * static_cast<size_t>(vocab_size());
  if (logits_.size() < n) logits_.resize(n);
  HEARTH_RETURN_IF_ERROR(model_.forward(input, cache_, logits_.data()));
  return std::span<const float>(logits_.data(), n);
}

}  // namespace hearth
