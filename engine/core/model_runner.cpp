#include "engine/core/model_runner.h"

#include <chrono>

namespace hearth {
namespace {

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

float* ModelRunner::hidden_for(const ModelInput& input) {
  const size_t n = input.hidden_rows.size() * static_cast<size_t>(model_.config().dim);
  if (hidden_.size() < n) hidden_.resize(n);
  hidden_view_ = std::span<const float>(hidden_.data(), n);
  return n == 0 ? nullptr : hidden_.data();
}

Result<std::span<const float>> ModelRunner::run(const ModelInput& input) {
  const size_t n = input.logit_rows.size() * static_cast<size_t>(vocab_size());
  if (logits_.size() < n) logits_.resize(n);
  if (sink_ != nullptr) {
    HEARTH_RETURN_IF_ERROR(model_.check(input, cache_));  // the other ranks never see a bad step
    HEARTH_RETURN_IF_ERROR(sink_->publish(input));
  }
  const uint64_t t0 = now_ns();
  HEARTH_RETURN_IF_ERROR(model_.forward(input, cache_, logits_.data(), hidden_for(input)));
  model_.backend().synchronize();  // a step without logit rows read nothing back
  last_step_ns_ = now_ns() - t0;
  return std::span<const float>(logits_.data(), n);
}

Result<std::span<const SampledRow>> ModelRunner::run_sampled(const ModelInput& input, std::span<const SampleRow> rows) {
  if (sampled_.size() < rows.size()) sampled_.resize(rows.size());
  if (sink_ != nullptr) {
    HEARTH_RETURN_IF_ERROR(model_.check(input, cache_));
    HEARTH_RETURN_IF_ERROR(sink_->publish(input));
  }
  const uint64_t t0 = now_ns();
  const std::span<SampledRow> out(sampled_.data(), rows.size());
  HEARTH_RETURN_IF_ERROR(model_.forward_sampled(input, cache_, rows, out, hidden_for(input)));
  model_.backend().synchronize();  // a step without sampled rows read nothing back
  last_step_ns_ = now_ns() - t0;
  return std::span<const SampledRow>(out);
}

Status ModelRunner::run_shard(const ModelInput& input) {
  const uint64_t t0 = now_ns();
  HEARTH_RETURN_IF_ERROR(model_.forward(input, cache_, nullptr));
  last_step_ns_ = now_ns() - t0;
  return Status::ok();
}

}  // namespace hearth
