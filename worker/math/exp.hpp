// exp for the elementwise loops (GELU, softmax). On the host it is branch-free arithmetic that GCC
// vectorises (glibc's expf/tanhf are scalar calls, and GELU's tanhf alone took ~15% of a CPU
// training step); on the device it is CUDA's expf.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "worker/math/hd.hpp"

namespace xtrain::math {

// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-6 polynomial for
// exp(r) (about 1 ulp), scaled by 2^n through the exponent bits. Inputs are clamped to
// [-87.3, 88.3] so that 2^n stays a normal float: exp of anything below gives ~1e-38 instead of
// 0 and of anything above ~2e38 instead of inf, which the callers (x / (1 + exp(..)), softmax of
// max-subtracted inputs) treat the same.
XTRAIN_HD inline float exp_fast(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t bits = (static_cast<std::int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
#endif
}

}  // namespace xtrain::math
