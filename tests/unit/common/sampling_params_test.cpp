// One set of sampling limits: every range's ends, NaN, and top_k.
#include "common/sampling_params.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace hearth {
namespace {

TEST(SamplingParamsTest, DefaultsAreValidAndEveryRangeIsCheckedAtBothEnds) {
  EXPECT_TRUE(sampling_params_validate({}).is_ok());
  struct Field {
    const SamplingRange& range;
    std::function<float&(SamplingParams&)> get;
  };
  const std::vector<Field> fields = {
      {kTemperatureRange, [](SamplingParams& p) -> float& { return p.temperature; }},
      {kTopPRange, [](SamplingParams& p) -> float& { return p.top_p; }},
      {kMinPRange, [](SamplingParams& p) -> float& { return p.min_p; }},
      {kRepetitionPenaltyRange, [](SamplingParams& p) -> float& { return p.repetition_penalty; }},
      {kPresencePenaltyRange, [](SamplingParams& p) -> float& { return p.presence_penalty; }},
      {kFrequencyPenaltyRange, [](SamplingParams& p) -> float& { return p.frequency_penalty; }},
  };
  for (const Field& f : fields) {
    const auto r = f.range;
    auto check = [&](double v) {
      SamplingParams p;
      f.get(p) = static_cast<float>(v);
      return sampling_params_validate(p);
    };
    EXPECT_TRUE(check(r.hi).is_ok()) << r.name;
    EXPECT_EQ(check(r.lo).is_ok(), !r.lo_open) << r.name;
    const Status above = check(r.hi + 0.01);
    EXPECT_EQ(above.code(), ErrorCode::kOutOfRange) << r.name;
    EXPECT_NE(above.message().find(r.name), std::string::npos) << above.message();
    EXPECT_FALSE(check(r.lo - 0.01).is_ok()) << r.name;
    EXPECT_FALSE(check(std::nan("")).is_ok()) << r.name;
  }
  EXPECT_FALSE(sampling_params_validate({.top_k = -1}).is_ok());
  EXPECT_TRUE(sampling_params_validate({.top_k = 40}).is_ok());
}

}  // namespace
}  // namespace hearth
