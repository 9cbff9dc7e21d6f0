// The fp32 -> bf16 rounding that every bf16 store uses (worker/math/bf16.hpp), against a
// reference written independently: arithmetic in double on the value, not on its bits. A bf16
// has 8 significant bits, so between 2^e and 2^(e+1) its values are the multiples of
// ulp = 2^(e-7) (and below 2^-126 the multiples of 2^-133, the subnormals); the reference takes
// the two multiples around |x|, keeps the nearer one (at a tie, the one that is an even multiple),
// and calls anything that reaches 2^128 infinity. Every step is exact in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "worker/math/bf16.hpp"

namespace {

using xtrain::math::bf16_bits_from_float;
using xtrain::math::float_from_bf16_bits;
using xtrain::math::round_to_bf16;

float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

std::uint16_t reference_bf16(float x) {
  if (std::isnan(x)) return 0x7FFF;
  const bool negative = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  double rounded = 0.0;
  if (std::isinf(a)) {
    rounded = a;
  } else if (a > 0.0) {
    int e = 0;
    std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): a lies in [2^(e-1), 2^e)
    const double ulp = a < std::ldexp(1.0, -126) ? std::ldexp(1.0, -133) : std::ldexp(1.0, e - 8);
    const double below = std::floor(a / ulp);
    const double low = below * ulp, high = (below + 1.0) * ulp;
    const double to_low = a - low, to_high = high - a;
    const bool below_is_even = std::fmod(below, 2.0) == 0.0;
    rounded = to_low < to_high || (to_low == to_high && below_is_even) ? low : high;
    if (rounded >= std::ldexp(1.0, 128)) rounded = std::numeric_limits<double>::infinity();
  }
  const float f = static_cast<float>(negative ? -rounded : rounded);  // exact: a bf16 value
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0xFFFFu) != 0u) FAIL("the reference produced a value that is not a bf16");
  return static_cast<std::uint16_t>(bits >> 16);
}

}  // namespace

TEST_CASE("bf16 rounding: ties go to the even neighbour, both ways", "[bf16]") {
  CHECK(bf16_bits_from_float(from_bits(0x3F808000)) == 0x3F80);  // 1 + 2^-8: tie, 0x3F80 is even: down
  CHECK(bf16_bits_from_float(from_bits(0x3F818000)) == 0x3F82);  // tie above odd 0x3F81: up
  CHECK(bf16_bits_from_float(from_bits(0xBF818000)) == 0xBF82);  // the same, negative
  CHECK(bf16_bits_from_float(from_bits(0x3F807FFF)) == 0x3F80);  // just below a tie: down
  CHECK(bf16_bits_from_float(from_bits(0x3F808001)) == 0x3F81);  // just above a tie: up
  CHECK(bf16_bits_from_float(from_bits(0x3FFF8000)) == 0x4000);  // a tie that carries into the exponent
}

TEST_CASE("bf16 rounding: overflow, subnormals, zeros, infinities", "[bf16]") {
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::max()) == 0x7F80);     // FLT_MAX rounds to inf
  CHECK(bf16_bits_from_float(-std::numeric_limits<float>::max()) == 0xFF80);
  CHECK(bf16_bits_from_float(from_bits(0x7F7F7FFF)) == 0x7F7F);  // just below the tie: largest finite bf16
  CHECK(bf16_bits_from_float(from_bits(0x7F7F8000)) == 0x7F80);  // the tie above odd 0x7F7F: inf
  CHECK(bf16_bits_from_float(from_bits(0x00000001)) == 0x0000);  // smallest subnormal: to +0
  CHECK(bf16_bits_from_float(from_bits(0x00008000)) == 0x0000);  // tie between 0 and the smallest bf16 subnormal
  CHECK(bf16_bits_from_float(from_bits(0x00018000)) == 0x0002);  // tie above odd 0x0001
  CHECK(bf16_bits_from_float(from_bits(0x00008001)) == 0x0001);
  CHECK(bf16_bits_from_float(from_bits(0x807FFFFF)) == 0x8080);  // largest subnormal rounds to -2^-126
  CHECK(bf16_bits_from_float(0.0f) == 0x0000);
  CHECK(bf16_bits_from_float(-0.0f) == 0x8000);
  CHECK(bf16_bits_from_float(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(bf16_bits_from_float(-std::numeric_limits<float>::infinity()) == 0xFF80);
}

TEST_CASE("bf16 rounding: every NaN stays NaN (the canonical 0x7FFF, as the GPU stores it)", "[bf16]") {
  // The naive carry would turn 0x7F800001 into +inf and 0x7FFFFFFF into -0: neither may happen.
  for (std::uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7FFFFFFFu, 0xFFFFFFFFu, 0x7F808000u}) {
    INFO(std::hex << nan);
    CHECK(bf16_bits_from_float(from_bits(nan)) == 0x7FFF);
    CHECK(std::isnan(round_to_bf16(from_bits(nan))));
  }
}

TEST_CASE("bf16 rounding matches the double-precision reference across every exponent", "[bf16]") {
  std::mt19937 rng(17);
  // For each sign and exponent, one random upper half and all 65536 lower halves (every
  // rounding case of that binade's neighbourhood: below, at and above each tie).
  for (std::uint32_t sign = 0; sign < 2; ++sign) {
    for (std::uint32_t exponent = 0; exponent < 256; ++exponent) {
      const std::uint32_t high = sign << 15 | exponent << 7 | (rng() & 0x7Fu);
      for (std::uint32_t low = 0; low < 0x10000u; ++low) {
        const float x = from_bits(high << 16 | low);
        const std::uint16_t got = bf16_bits_from_float(x), want = reference_bf16(x);
        if (got != want) FAIL("x bits 0x" << std::hex << (high << 16 | low) << ": got 0x" << got << ", want 0x" << want);
      }
    }
  }
  for (int i = 0; i < 1000000; ++i) {
    const float x = from_bits(static_cast<std::uint32_t>(rng()));
    const std::uint16_t got = bf16_bits_from_float(x), want = reference_bf16(x);
    if (got != want) FAIL("random x: got 0x" << std::hex << got << ", want 0x" << want);
  }
}

TEST_CASE("round_to_bf16 is the stored value read back and is idempotent", "[bf16]") {
  std::mt19937 rng(18);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (int i = 0; i < 10000; ++i) {
    const float x = normal(rng);
    const float r = round_to_bf16(x);
    CHECK(r == float_from_bf16_bits(bf16_bits_from_float(x)));
    CHECK(round_to_bf16(r) == r);
    CHECK(std::fabs(r - x) <= std::ldexp(std::fabs(x), -8));  // half an ulp: 2^-8 relative
  }
}
