// Interpret mode's cuda_bf16.h (cuda/interp/include/): conversions as the CUDA Math API states
// them, and bit for bit the rounding the CPU backend uses (worker/math/bf16.hpp, itself checked
// against an independent reference in tests/worker/math/test_bf16.cpp), so a kernel run in
// interpret mode rounds exactly as the CPU backend's emulation of the GPU does.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>

#include "worker/math/bf16.hpp"

namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
std::uint16_t rn(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
bool is_bf16_nan(std::uint16_t h) { return (h & 0x7FFFu) > 0x7F80u; }

}  // namespace

TEST_CASE("interp bf16: every bit pattern becomes the fp32 with those top bits and rounds back to itself",
          "[interp][bf16]") {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const __nv_bfloat16 x = __ushort_as_bfloat16(static_cast<std::uint16_t>(h));
    REQUIRE(__bfloat16_as_ushort(x) == h);
    const float f = __bfloat162float(x);
    INFO("bf16 bits " << h);
    CHECK(bits_of(f) == h << 16);  // exact, NaN payloads kept
    CHECK(bits_of(static_cast<float>(x)) == h << 16);
    if (is_bf16_nan(static_cast<std::uint16_t>(h))) {
      CHECK(std::isnan(f));
      CHECK(is_bf16_nan(rn(f)));
    } else {
      CHECK(rn(f) == h);
    }
  }
}

TEST_CASE("interp bf16: __float2bfloat16_rn is the CPU backend's rounding bit for bit", "[interp][bf16]") {
  auto same = [](float x) {
    INFO("fp32 bits " << bits_of(x));
    const std::uint16_t want = xtrain::math::bf16_bits_from_float(x);
    CHECK(rn(x) == want);
    CHECK(__bfloat16_as_ushort(__float2bfloat16(x)) == want);
    CHECK(__bfloat16_as_ushort(__nv_bfloat16(x)) == want);  // the constructor rounds the same way
  };
  std::mt19937 rng(1202);
  std::uniform_int_distribution<std::uint32_t> any_bits;
  for (int i = 0; i < 1 << 20; ++i) same(float_of(any_bits(rng)));
  for (std::uint32_t top = 0; top <= 0xFFFF; ++top) {  // every tie, its neighbours, every subnormal step
    for (const std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u}) same(float_of(top << 16 | low));
  }
  for (const float x : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::quiet_NaN()})
    same(x);
}

TEST_CASE("interp bf16: nearest even by hand (ties, subnormals, zeros, infinities, overflow)", "[interp][bf16]") {
  // Expectations worked out from the format, not from any rounding code: the kept half is the
  // top 16 bits; a dropped half above 0x8000 rounds up, 0x8000 is a tie that goes to the even
  // kept half, and rounding up the largest finite bf16's neighbours carries into infinity.
  CHECK(rn(float_of(0x3F808000u)) == 0x3F80);  // 1 + 2^-8: tie, 0x3F80 is even
  CHECK(rn(float_of(0x3F818000u)) == 0x3F82);  // tie, 0x3F81 is odd: up
  CHECK(rn(float_of(0x3F808001u)) == 0x3F81);  // just above the tie
  CHECK(rn(float_of(0x3F807FFFu)) == 0x3F80);  // just below it
  CHECK(rn(float_of(0xBF818000u)) == 0xBF82);  // the sign does not change the rule
  CHECK(rn(float_of(0x00008000u)) == 0x0000);  // subnormal tie down to +0
  CHECK(rn(float_of(0x00018000u)) == 0x0002);  // subnormal tie up to the even step
  CHECK(rn(float_of(0x007FFFFFu)) == 0x0080);  // largest subnormal rounds up to the smallest normal
  CHECK(rn(0.0f) == 0x0000);
  CHECK(rn(-0.0f) == 0x8000);
  CHECK(rn(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(rn(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(rn(float_of(0x7F7F7FFFu)) == 0x7F7F);  // below the tie under the largest bf16: stays finite
  CHECK(rn(float_of(0x7F7F8000u)) == 0x7F80);  // tie, 0x7F7F odd: up, to +inf
  CHECK(rn(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(rn(-std::numeric_limits<float>::max()) == 0xFF80);
  CHECK(is_bf16_nan(rn(std::numeric_limits<float>::quiet_NaN())));
  CHECK(is_bf16_nan(rn(float_of(0xFFFFFFFFu))));  // a NaN whose carry would flip the sign
  CHECK(is_bf16_nan(rn(float_of(0x7F800001u))));  // a signalling NaN whose top half alone reads as inf
}

TEST_CASE("interp bf16x2: __floats2bfloat162_rn puts a in the low 16 bits, b in the high", "[interp][bf16]") {
  const float a = 1.5f, b = float_of(0xC0490FDBu);  // -pi: rounds (to 0xC049)
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  std::uint32_t word;
  std::memcpy(&word, &v, sizeof word);
  CHECK((word & 0xFFFFu) == rn(a));
  CHECK(word >> 16 == rn(b));
  CHECK(rn(b) == 0xC049);
  CHECK(__bfloat16_as_ushort(v.x) == rn(a));
  CHECK(__bfloat16_as_ushort(v.y) == rn(b));
  CHECK(__low2float(v) == 1.5f);
  CHECK(bits_of(__high2float(v)) == 0xC0490000u);
  const __nv_bfloat162 w(__ushort_as_bfloat16(0x1234), __ushort_as_bfloat16(0xABCD));
  std::memcpy(&word, &w, sizeof word);
  CHECK(word == 0xABCD1234u);
}

TEST_CASE("interp bf16: value-initialised is +0 and the types have CUDA's sizes", "[interp][bf16]") {
  STATIC_REQUIRE(sizeof(__nv_bfloat16) == 2);
  STATIC_REQUIRE(sizeof(__nv_bfloat162) == 4);
  STATIC_REQUIRE(alignof(__nv_bfloat162) == 4);
  STATIC_REQUIRE(std::is_trivially_copyable_v<__nv_bfloat16>);
  STATIC_REQUIRE(std::is_trivially_copyable_v<__nv_bfloat162>);
  CHECK(__bfloat16_as_ushort(__nv_bfloat16{}) == 0x0000);
  const __nv_bfloat162 pair{};
  CHECK(__bfloat16_as_ushort(pair.x) == 0x0000);
  CHECK(__bfloat16_as_ushort(pair.y) == 0x0000);
}
