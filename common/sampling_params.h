// A request's sampling parameters: one plain struct from the HTTP API's parse result,
// through the broker slot (it is stored there as is, so it is standard-layout and
// trivially copyable), to the engine's sampler. One set of defaults, one set of limits,
// one validate.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>

#include "common/status.h"

namespace hearth {

// Top alternatives reported per token at most (what a broker slot stores per token).
inline constexpr int32_t kMaxTopLogprobs = 8;

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off
  float repetition_penalty = 1.0f;  // 1: off; > 1 discourages repeats (prompt and output)
  float presence_penalty = 0.0f;    // subtracted once from every token already in the output
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the output
  int32_t top_k = 0;                // 0: off
  uint32_t reserved = 0;            // keeps the layout free of padding
  uint64_t seed = 0;
};
static_assert(std::is_standard_layout_v<SamplingParams> && std::is_trivially_copyable_v<SamplingParams>);
static_assert(sizeof(SamplingParams) == 40);

// A bias added to one token's logit before sampling (OpenAI's logit_bias).
struct LogitBias {
  int32_t id = 0;
  float bias = 0.0f;  // kLogitBiasRange
};
static_assert(std::is_standard_layout_v<LogitBias> && sizeof(LogitBias) == 8);
// Entries of logit_bias a request may give.
inline constexpr int32_t kMaxLogitBias = 1024;

// The accepted range of one floating-point parameter.
struct SamplingRange {
  std::string_view name;
  double lo;
  bool lo_open;  // lo itself is outside the range
  double hi;
  bool contains(double v) const { return (lo_open ? v > lo : v >= lo) && v <= hi; }
};
inline constexpr SamplingRange kTemperatureRange{"temperature", 0.0, false, 2.0};
inline constexpr SamplingRange kTopPRange{"top_p", 0.0, true, 1.0};
inline constexpr SamplingRange kMinPRange{"min_p", 0.0, false, 1.0};
inline constexpr SamplingRange kRepetitionPenaltyRange{"repetition_penalty", 0.0, true, 2.0};
inline constexpr SamplingRange kPresencePenaltyRange{"presence_penalty", -2.0, false, 2.0};
inline constexpr SamplingRange kFrequencyPenaltyRange{"frequency_penalty", -2.0, false, 2.0};
inline constexpr SamplingRange kLogitBiasRange{"logit_bias", -100.0, false, 100.0};

// kOutOfRange naming the parameter, its value and its range ("temperature must be between
// 0 and 2, not 7"), for the first value outside its range (NaN is outside every range);
// top_k must be >= 0.
Status sampling_range_check(const SamplingRange& range, double value);
Status sampling_params_validate(const SamplingParams& params);

}  // namespace hearth
