#include "worker/train/adamw.hpp"

#include <cmath>

#include "worker/model/gpt.hpp"

namespace xtrain {

AdamWConfig AdamWConfig::from(const TrainSpec& t) {
  AdamWConfig c;
  c.beta1 = static_cast<float>(t.beta1);
  c.beta2 = static_cast<float>(t.beta2);
  c.eps = static_cast<float>(t.eps);
  c.weight_decay = static_cast<float>(t.weight_decay);
  return c;
}

double grad_norm(Backend& backend, const float* grads, size_t n) { return std::sqrt(backend.sum_squares(grads, n)); }

float clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double s = max_norm / (norm + 1e-6);
  return s < 1.0 ? static_cast<float>(s) : 1.0f;
}

AdamW::AdamW(Backend& backend, const ParamLayout& layout, const AdamWConfig& config)
    : backend_(backend), config_(config), n_(layout.total()) {
  m_ = backend_.alloc_floats(n_);
  v_ = backend_.alloc_floats(n_);
  // Tensors are contiguous in layout order; merge neighbours with the same decay flag so a step
  // is a handful of updates rather than one per tensor.
  for (const ParamTensor& t : layout.tensors()) {
    if (!runs_.empty() && runs_.back().decay == t.decay &&
        runs_.back().span.offset + runs_.back().span.count == t.offset) {
      runs_.back().span.count += t.count;
    } else {
      runs_.push_back({{t.offset, t.count}, t.decay});
    }
  }
}

AdamW::~AdamW() {
  backend_.free(v_);
  backend_.free(m_);
}

void AdamW::step(float* params, ActPtr weights, const float* grads, float lr, float grad_scale) {
  ++t_;
  AdamWHyper h;
  h.lr = lr;
  h.beta1 = config_.beta1;
  h.beta2 = config_.beta2;
  h.eps = config_.eps;
  h.grad_scale = grad_scale;
  h.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config_.beta1), static_cast<double>(t_)));
  h.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(config_.beta2), static_cast<double>(t_)));
  for (const Run& r : runs_) {
    h.weight_decay = r.decay ? config_.weight_decay : 0.0f;
    const size_t o = r.span.offset;
    backend_.adamw_update(params + o, weights ? weights + o : weights, grads + o, m_ + o, v_ + o, r.span.count, h);
  }
}

void AdamW::step(GPT& model, float lr, float grad_scale) {
  step(model.params(), model.weight_copy(), model.grads(), lr, grad_scale);
}

}  // namespace xtrain
