#include "common/sampling_params.h"

namespace hearth {

Status sampling_range_check(const SamplingRange& r, double v) {
  if (r.contains(v)) return Status::ok();
  if (r.lo_open) {
    return make_error(ErrorCode::kOutOfRange, "{} must be greater than {} and at most {}, not {}", r.name, r.lo, r.hi,
                      v);
  }
  return make_error(ErrorCode::kOutOfRange, "{} must be between {} and {}, not {}", r.name, r.lo, r.hi, v);
}

Status sampling_params_validate(const SamplingParams& p) {
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kTemperatureRange, p.temperature));
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kTopPRange, p.top_p));
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kMinPRange, p.min_p));
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kRepetitionPenaltyRange, p.repetition_penalty));
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kPresencePenaltyRange, p.presence_penalty));
  HEARTH_RETURN_IF_ERROR(sampling_range_check(kFrequencyPenaltyRange, p.frequency_penalty));
  if (p.top_k < 0) return make_error(ErrorCode::kOutOfRange, "top_k must be at least 0, not {}", p.top_k);
  return Status::ok();
}

}  // namespace hearth
