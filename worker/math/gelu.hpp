// GELU, tanh approximation (GPT-2's, PyTorch's approximate="tanh"), and its derivative.
// With u = sqrt(2/pi) (x + 0.044715 x^3):  gelu(x) = x/2 (1 + tanh(u)) = x * s,  s = sigmoid(2u),
// since (1 + tanh(u))/2 = sigmoid(2u). One exp per element and no cancellation near u = 0.
#pragma once

#include "worker/math/exp.hpp"
#include "worker/math/hd.hpp"

namespace xtrain::math {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

XTRAIN_HD inline float gelu_sigmoid(float x) {
  const float u = kGeluScale * (x + kGeluCubic * x * x * x);
  return 1.0f / (1.0f + exp_fast(-2.0f * u));
}

XTRAIN_HD inline float gelu(float x) { return x * gelu_sigmoid(x); }

// gelu'(x) = s + x * 2 s (1 - s) du/dx,  du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// (the tanh form's x/2 (1 - tanh(u)^2) du/dx, with 1 - tanh(u)^2 = 4 s (1 - s)).
XTRAIN_HD inline float gelu_grad(float x) {
  const float s = gelu_sigmoid(x);
  const float du = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * du;
}

}  // namespace xtrain::math
