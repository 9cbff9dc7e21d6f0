// Softmax pieces: the online (running max, running sum) accumulator that a row or a tile can be
// streamed through and merged, and the fused cross-entropy row.
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
