// e^x in plain float operations, so that loops over it vectorize and every instruction
// set rounds alike (libm's expf is a call per element). Internal linkage: each file
// compiled with its own target flags keeps its own copy.
#pragma once

#include <cstdint>

namespace hearth::kernels::cpu {
namespace {

// e^x for x <= 0 (a score minus the running maximum, a logit minus the largest), within
// 2 ulp: x = n ln2 + r (Cody-Waite), a degree-6 polynomial for e^r, times 2^n built in
// the exponent bits. Below -87 the result is ~1e-38, nothing next to e^0 = 1. Always
// inlined: a call (GCC outlines it from large callers) is a call per element, scalar.
[[gnu::always_inline]] inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to an integer
  const float n = (x * 1.44269504088896341f + kMagic) - kMagic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// silu(g) = g / (1 + e^-g), through e^-|g| so the exponential never overflows.
[[gnu::always_inline]] inline float silu(float g) {
  const float e = exp_nonpositive(g < 0.0f ? g : -g);
  const float r = 1.0f / (1.0f + e);
  return g < 0.0f ? g * e * r : g * r;
}

}  // namespace
}  // namespace hearth::kernels::cpu
