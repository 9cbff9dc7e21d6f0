// exp for the elementwise loops (GELU, softmax). On the host it is branch-free arithmetic that GCC
// vectorises (glibc's expf/tanhf are scalar calls, and GELU's tanhf alone took ~15% of a CPU
// training step); on the device it is CUDA's expf.
#pragma once

#include <math.h>

#include <cstdint>
#include <cstring>

#include "worker/math/hd.hpp"

namespace xtrain::math {

#ifndef __CUDA_ARCH__
// c ? a : b on the bits, with no branch for the compiler to see. A clamp written as `x < lo ? lo :
// x` is a branch until GCC if-converts it, and before that its PRE pass copies everything the
// caller computes from the clamped x into each arm, folded to constants; the vectorised loop then
// computes all three arms for every element and blends. In GELU the arm for x > 88.3 multiplies
// the input by 1 / (1 + exp(88.3)) = 4.7e-39, a subnormal, and every such product takes a
// microcode assist: the forward pass ran 8x slower (14 ms against 1.7 ms for 1.5 M elements) for
// an arm that real inputs never take.
inline float select_bits(bool c, float a, float b) {
  std::uint32_t ia, ib;
  std::memcpy(&ia, &a, sizeof ia);
  std::memcpy(&ib, &b, sizeof ib);
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(c);
  const std::uint32_t r = (ia & mask) | (ib & ~mask);
  float out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}
#endif

// Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-6 polynomial for
// exp(r) (about 1 ulp), scaled by 2^n through the exponent bits. Inputs are clamped to
// [-87.3, 88.3] so that 2^n stays a normal float: exp of anything below gives ~1e-38 instead of
// 0 and of anything above ~2e38 instead of inf, which the callers (x / (1 + exp(..)), softmax of
// max-subtracted inputs) treat the same. A NaN passes the clamp and comes out NaN.
XTRAIN_HD inline float exp_fast(float x) {
#ifdef __CUDA_ARCH__
  return expf(x);
#else
  x = select_bits(x < -87.3f, -87.3f, x);
  x = select_bits(x > 88.3f, 88.3f, x);
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
