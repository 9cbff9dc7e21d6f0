// Comparing bf16 results: two computations that store the same exact value rounded to bf16 agree
// exactly, except where their fp32 arithmetic (in another order, or with another exp) straddles a
// rounding boundary: then they are one bf16 ulp apart. check_bf16_close asserts exactly that,
// with an absolute floor for elements near zero that come from cancelling sums, and that the
// straddles are rare.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include "worker/math/bf16.hpp"

namespace xtrain::test {

// The spacing of bf16 values at |y|: 2^(e-7) for |y| in [2^(e-1), 2^e), 2^-133 below 2^-126.
inline double bf16_ulp(double y) {
  if (y == 0.0) return std::ldexp(1.0, -133);
  int e = 0;
  std::frexp(y, &e);
  return std::ldexp(1.0, std::max(e - 8, -133));
}

inline bool is_bf16(double x) {
  return static_cast<double>(xtrain::math::round_to_bf16(static_cast<float>(x))) == x;
}

// got[i] and want[i] (both bf16 values) within one ulp of the larger plus floor_of_rms x the RMS
// of want, and at least min_equal_share of them equal.
template <class V>
void check_bf16_close(const V& got, const V& want, double floor_of_rms, double min_equal_share) {
  REQUIRE(got.size() == want.size());
  double rms = 0.0;
  for (const auto x : want) rms += static_cast<double>(x) * x;
  rms = std::sqrt(rms / static_cast<double>(std::max<size_t>(want.size(), 1)));
  size_t equal = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    INFO("element " << i << ": got " << g << ", want " << w);
    REQUIRE(is_bf16(g));
    REQUIRE(std::abs(g - w) <= bf16_ulp(std::max(std::abs(g), std::abs(w))) + floor_of_rms * rms);
    equal += g == w;
  }
  INFO(equal << " of " << got.size() << " elements equal");
  CHECK(static_cast<double>(equal) >= min_equal_share * static_cast<double>(got.size()));
}

}  // namespace xtrain::test
