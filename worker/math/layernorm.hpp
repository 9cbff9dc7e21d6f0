// LayerNorm over one row of C channels: statistics, the normalisation, and the row's backward.
#pragma once

#include <math.h>
#include <stddef.h>

#include "worker/math/hd.hpp"
#include "worker/math/reduce.hpp"

namespace xtrain::math {

constexpr float kLayerNormEps = 1e-5f;  // PyTorch's default, as GPT-2 uses

struct RowStats {
  float mean;
  float rstd;  // 1 / sqrt(biased variance + eps)
};

// Two passes (mean, then the centred variance) for accuracy on rows with a large mean.
XTRAIN_HD inline RowStats layernorm_row_stats(const float* x, int C) {
  const float mean = row_sum(x, C) / static_cast<float>(C);
  const float var = row_sum_sq_dev(x, mean, C) / static_cast<float>(C);
  return {mean, 1.0f / sqrtf(var + kLayerNormEps)};
}

// out = (x - mean) * rstd * w + b
XTRAIN_HD inline void layernorm_row_forward(float* out, const float* x, const float* w, const float* b,
                                            RowStats s, int C) {
  for (int i = 0; i < C; ++i) out[i] = (x[i] - s.mean) * s.rstd * w[i] + b[i];
}

// The row's two reductions for backward, with n = (x - mean) * rstd and g = dout * w:
// mean_g = mean(g), mean_gn = mean(g * n).
struct LayerNormBackwardSums {
  float mean_g;
  float mean_gn;
};

XTRAIN_HD inline LayerNormBackwardSums layernorm_row_backward_sums(const float* dout, const float* x,
                                                                   const float* w, RowStats s, int C) {
  float sg[kLanes] = {}, sgn[kLanes] = {};  // lanes as in worker/math/reduce.hpp
  int i = 0;
  for (; i + kLanes <= C; i += kLanes) {
    for (int k = 0; k < kLanes; ++k) {
      const float g = dout[i + k] * w[i + k];
      sg[k] += g;
      sgn[k] += g * (x[i + k] - s.mean) * s.rstd;
    }
  }
  for (; i < C; ++i) {
    const float g = dout[i] * w[i];
    sg[i % kLanes] += g;
    sgn[i % kLanes] += g * (x[i] - s.mean) * s.rstd;
  }
  return {combine_lanes(sg) / static_cast<float>(C), combine_lanes(sgn) / static_cast<float>(C)};
}

// d loss / d x_i = rstd * (g_i - mean_g - n_i * mean_gn)
XTRAIN_HD inline float layernorm_dinp(float dout, float x, float w, RowStats s, LayerNormBackwardSums r) {
  const float n = (x - s.mean) * s.rstd;
  return s.rstd * (dout * w - r.mean_g - n * r.mean_gn);
}

// Backward of one row's input: dx += d loss / dx. dx overlaps none of the others.
XTRAIN_HD inline void layernorm_row_backward_input(float* XTRAIN_RESTRICT dx, const float* XTRAIN_RESTRICT dout,
                                                   const float* XTRAIN_RESTRICT x, const float* XTRAIN_RESTRICT w,
                                                   RowStats s, int C) {
  const LayerNormBackwardSums r = layernorm_row_backward_sums(dout, x, w, s, C);
  for (int i = 0; i < C; ++i) dx[i] += layernorm_dinp(dout[i], x[i], w[i], s, r);
}

// One row's part of the weight and bias gradients in the columns [first, last): dw += dout * n,
// db += dout. The CPU backend adds the rows in row order on any number of threads, each thread
// taking whole columns.
XTRAIN_HD inline void layernorm_row_backward_params(float* XTRAIN_RESTRICT dw, float* XTRAIN_RESTRICT db,
                                                    const float* XTRAIN_RESTRICT dout,
                                                    const float* XTRAIN_RESTRICT x, RowStats s, size_t first,
                                                    size_t last) {
  for (size_t i = first; i < last; ++i) {
    dw[i] += dout[i] * (x[i] - s.mean) * s.rstd;
    db[i] += dout[i];
  }
}

}  // namespace xtrain::math
