// AdamW with decoupled weight decay on the 2-D weights only (ParamTensor::decay), global-norm
// gradient clipping folded into the update as a gradient scale. The moments m and v live in
// backend memory with the parameter layout, so checkpoints read and write them as flat buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/job_spec.hpp"
#include "worker/model/backend.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

class GPT;

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;

  static AdamWConfig from(const TrainSpec& t);
};

// The global L2 norm of the gradients (deterministic, accumulated in double).
double grad_norm(Backend& backend, const float* grads, size_t n);

// PyTorch's clip_grad_norm_ factor: min(1, max_norm / (norm + 1e-6)); 1 when max_norm <= 0.
float clip_scale(double norm, double max_norm);

class AdamW {
 public:
  AdamW(Backend& backend, const ParamLayout& layout, const AdamWConfig& config);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update of every parameter: t += 1, then params -= AdamW(grad_scale * grads) at rate lr,
  // and the activation-dtype copy `weights` (or null) refreshed in the same pass.
  void step(float* params, ActPtr weights, const float* grads, float lr, float grad_scale);
  void step(GPT& model, float lr, float grad_scale);

  float* m() { return m_; }                  // (layout.total()) backend memory
  float* v() { return v_; }                  // (layout.total()) backend memory
  const float* m() const { return m_; }
  const float* v() const { return v_; }
  size_t size() const { return n_; }
  std::int64_t step_count() const { return t_; }  // updates done so far
  void set_step_count(std::int64_t t) { t_ = t; }
  const AdamWConfig& config() const { return config_; }

 private:
  struct Run {             // a maximal contiguous span of tensors that share the decay flag
    Span span;
    bool decay = false;
  };
  Backend& backend_;
  AdamWConfig config_;
  size_t n_ = 0;
  float* m_ = nullptr;     // (n)
  float* v_ = nullptr;     // (n)
  std::vector<Run> runs_;
  std::int64_t t_ = 0;
};

}  // namespace xtrain
