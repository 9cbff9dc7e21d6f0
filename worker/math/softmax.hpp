// Softmax pieces: the online (running max, running sum) accumulator that a row or a tile can be
// streamed through and merged, the causal attention row, and the fused cross-entropy row.
#pragma once

#include <math.h>

#include "worker/math/exp.hpp"
#include "worker/math/hd.hpp"
#include "worker/math/reduce.hpp"

namespace xtrain::math {

// sum_j exp(x_j - max) over the elements seen so far.
struct OnlineSoftmax {
  float max;
  float sum;
};

XTRAIN_HD inline OnlineSoftmax online_softmax_init() { return {-INFINITY, 0.0f}; }

XTRAIN_HD inline OnlineSoftmax online_softmax_push(OnlineSoftmax a, float x) {
  if (x > a.max) return {x, a.sum * expf(a.max - x) + 1.0f};
  return {a.max, a.sum + expf(x - a.max)};
}

XTRAIN_HD inline OnlineSoftmax online_softmax_merge(OnlineSoftmax a, OnlineSoftmax b) {
  if (b.max == -INFINITY) return a;
  if (a.max == -INFINITY) return b;
  const float m = a.max > b.max ? a.max : b.max;
  return {m, a.sum * expf(a.max - m) + b.sum * expf(b.max - m)};
}

// Causal attention row t, in place: row[j] = softmax_j(scale * row[j]) over j <= t, and 0 for
// t < j < T. scale > 0.
XTRAIN_HD inline void causal_softmax_row(float* row, int t, int T, float scale) {
  const int n = t + 1;
  const float mx = scale * row_max(row, n);
  for (int j = 0; j < n; ++j) row[j] = exp_fast(scale * row[j] - mx);
  const float inv = 1.0f / row_sum(row, n);
  for (int j = 0; j < n; ++j) row[j] *= inv;
  for (int j = n; j < T; ++j) row[j] = 0.0f;
}

// Backward of p = softmax(scale * s) over j <= t, in place: dp (the gradient of p) becomes the
// gradient of s, scale * p_j * (dp_j - sum_k p_k dp_k); entries t < j < T become 0.
XTRAIN_HD inline void causal_softmax_backward_row(float* dp, const float* p, int t, int T, float scale) {
  const int n = t + 1;
  const float dot = row_dot(p, dp, n);
  for (int j = 0; j < n; ++j) dp[j] = scale * p[j] * (dp[j] - dot);
  for (int j = n; j < T; ++j) dp[j] = 0.0f;
}

// One row of the fused softmax + cross-entropy over the first V of Vp logits: returns
// -log softmax(logits)[target] and overwrites the row with dloss * (softmax - onehot(target)),
// zero in the padded columns V..Vp-1. The normalised probabilities are never stored.
XTRAIN_HD inline float softmax_cross_entropy_row(float* logits, int target, float dloss, int V, int Vp) {
  const float mx = row_max(logits, V);
  const float target_logit = logits[target];
  for (int j = 0; j < V; ++j) logits[j] = exp_fast(logits[j] - mx);  // unnormalised, then scaled below
  const float sum = row_sum(logits, V);
  const float loss = logf(sum) + mx - target_logit;
  const float g = dloss / sum;
  for (int j = 0; j < V; ++j) logits[j] *= g;
  logits[target] -= dloss;
  for (int j = V; j < Vp; ++j) logits[j] = 0.0f;
  return loss;
}

}  // namespace xtrain::math
