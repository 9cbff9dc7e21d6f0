// bfloat16: the top half of an fp32 (1 sign, 8 exponent, 7 mantissa bits), and the one rounding
// every bf16 store uses, round to nearest with ties to even. The CUDA kernels store bf16 with
// __float2bfloat16_rn; the CPU backend emulates those stores with round_to_bf16 below, which is
// bit-identical to it (tests/worker/math/test_bf16.cpp checks it against an independent reference,
// and a [gpu] test against the intrinsic over every fp32 bit pattern).
#pragma once

#include <cstdint>
#include <cstring>

#include "worker/math/hd.hpp"

namespace xtrain::math {

XTRAIN_HD inline std::uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(x);
#else
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
#endif
}

XTRAIN_HD inline float float_from_bits(std::uint32_t b) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(b);
#else
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
#endif
}

constexpr std::uint16_t kBf16CanonicalNaN = 0x7FFF;

// Round to nearest even on the bits: adding 0x7FFF plus the lowest kept bit carries into the
// kept half exactly when the dropped half is above the tie, or at the tie when the kept half is
// odd. The carry runs on through the exponent, so the largest finite values round to infinity and
// subnormals to their neighbours, as IEEE rounding does. A NaN (whose carry could make it an
// infinity, or flip its sign) becomes the canonical NaN 0x7FFF, as __float2bfloat16_rn gives for
// every NaN.
XTRAIN_HD inline std::uint16_t bf16_bits_from_float(float x) {
  const std::uint32_t b = float_bits(x);
  const std::uint16_t rounded = static_cast<std::uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
  return (b & 0x7FFFFFFFu) > 0x7F800000u ? kBf16CanonicalNaN : rounded;
}

XTRAIN_HD inline float float_from_bf16_bits(std::uint16_t h) {
  return float_from_bits(static_cast<std::uint32_t>(h) << 16);
}

// x stored as bf16 and read back: the value the GPU holds after a bf16 store.
XTRAIN_HD inline float round_to_bf16(float x) { return float_from_bf16_bits(bf16_bits_from_float(x)); }

}  // namespace xtrain::math
