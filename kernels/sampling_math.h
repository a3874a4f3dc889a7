// The sampler's arithmetic, shared by the CPU sampler (engine/core/sampler.cpp) and the
// device sampling kernels: one definition of the seeded random stream, the penalties
// and the draw, so a seed gives the same token on either side. HEARTH_HD functions over
// plain values; header-only, pure; C++17.
#pragma once

#include <cstdint>

#include "common/hd.h"

namespace hearth::kernels::dev {

// The n-th value in [0, 1) of the splitmix64 stream that starts at `seed`, computed
// directly (a sequence resumed after a restart continues its stream).
HEARTH_HD double sampling_uniform_at(uint64_t seed, uint64_t n) {
  uint64_t z = seed + n * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

// A logit after the repetition penalty (when the id is in prompt or output: `seen`),
// then the presence and frequency penalties (over its `count` in the output).
HEARTH_HD float sampling_penalize(float logit, bool seen, int32_t count, float repetition, float presence,
                                  float frequency) {
  if (repetition != 1.0f && seen) logit = logit > 0.0f ? logit / repetition : logit * repetition;
  if (count > 0) {
#if defined(__CUDA_ARCH__)
    // Rounded as on the host: nvcc would contract the product and sum into one FMA.
    logit = __fsub_rn(logit, __fadd_rn(presence, __fmul_rn(frequency, static_cast<float>(count))));
#else
    logit -= presence + frequency * static_cast<float>(count);
#endif
  }
  return logit;
}

// The candidates' order: higher logit first, lower id on ties.
HEARTH_HD bool sampling_before(float logit_a, int32_t id_a, float logit_b, int32_t id_b) {
  return logit_a > logit_b || (logit_a == logit_b && id_a < id_b);
}

// A float's bits as an unsigned integer in the same order (larger float, larger value;
// -0 below +0): what the device's radix selection compares a byte at a time. NaN is
// not a candidate and has no place in the order.
HEARTH_HD uint32_t sampling_order_bits(float v) {
  const uint32_t bits = hd_float_bits(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

// A candidate's key: its logit over the temperature, -0 made +0 (the host orders them as
// equal, the order bits would not). Rounded as on the host: nvcc would contract the
// product and the add into one FMA, which keeps an underflowing product's -0.
HEARTH_HD float sampling_scaled_key(float logit, float inv_t) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(__fmul_rn(logit, inv_t), 0.0f);
#else
  return logit * inv_t + 0.0f;
#endif
}

// Whether min-p keeps a candidate of scaled logit `logit` when the top one's is `max`:
// its probability is at least min_p times the top's. `log_min_p` = log(min_p).
HEARTH_HD bool sampling_min_p_keeps(float logit, float max, double log_min_p) {
  return static_cast<double>(logit - max) >= log_min_p;
}

}  // namespace hearth::kernels::dev
