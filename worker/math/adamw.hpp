// The AdamW update of one parameter, shared by every backend.
#pragma once

#include <math.h>

#include "worker/math/hd.hpp"

namespace xtrain {

// Per-step AdamW hyperparameters, combined on the host once per step (worker/train/adamw.cpp).
struct AdamWHyper {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0;      // decoupled: p -= lr * weight_decay * p (0 for non-decayed spans)
  float grad_scale = 1;        // every gradient is multiplied by this first (global-norm clipping)
  float bias_correction1 = 1;  // 1 - beta1^t
  float bias_correction2 = 1;  // 1 - beta2^t
};

namespace math {

// PyTorch's torch.optim.AdamW order of operations: decay the parameter, update the moments,
// then step by lr * m_hat / (sqrt(v_hat) + eps). Returns the new parameter.
XTRAIN_HD inline float adamw_element(float p, float grad, float& m, float& v, const AdamWHyper& h) {
  const float g = grad * h.grad_scale;
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float m_hat = m / h.bias_correction1;
  const float v_hat = v / h.bias_correction2;
  p -= h.lr * h.weight_decay * p;
  return p - h.lr * m_hat / (sqrtf(v_hat) + h.eps);
}

}  // namespace math
}  // namespace xtrain
