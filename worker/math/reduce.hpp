// Row reductions in a fixed order: eight interleaved partial results (element j goes to lane
// j % 8), combined pairwise at the end. The order depends on n alone, so results are
// deterministic, and the eight independent lanes are a pattern GCC turns into vector code without
// the reassociation that a plain `s += x[j]` loop would need (-ffast-math).
#pragma once

#include <math.h>

#include "worker/math/hd.hpp"

namespace xtrain::math {

constexpr int kLanes = 8;

XTRAIN_HD inline float combine_lanes(const float* l) {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

XTRAIN_HD inline float row_sum(const float* x, int n) {
  float l[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) l[k] += x[j + k];
  for (; j < n; ++j) l[j % kLanes] += x[j];
  return combine_lanes(l);
}

XTRAIN_HD inline float row_max(const float* x, int n) {
  float l[kLanes];
  for (int k = 0; k < kLanes; ++k) l[k] = -INFINITY;
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) l[k] = l[k] > x[j + k] ? l[k] : x[j + k];
  for (; j < n; ++j) l[j % kLanes] = l[j % kLanes] > x[j] ? l[j % kLanes] : x[j];
  float m = l[0];
  for (int k = 1; k < kLanes; ++k) m = m > l[k] ? m : l[k];
  return m;
}

XTRAIN_HD inline float row_dot(const float* a, const float* b, int n) {
  float l[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) l[k] += a[j + k] * b[j + k];
  for (; j < n; ++j) l[j % kLanes] += a[j] * b[j];
  return combine_lanes(l);
}

// sum_j (x_j - c)^2
XTRAIN_HD inline float row_sum_sq_dev(const float* x, float c, int n) {
  float l[kLanes] = {};
  int j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int k = 0; k < kLanes; ++k) l[k] += (x[j + k] - c) * (x[j + k] - c);
  for (; j < n; ++j) l[j % kLanes] += (x[j] - c) * (x[j] - c);
  return combine_lanes(l);
}

}  // namespace xtrain::math
