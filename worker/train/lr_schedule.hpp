// The learning-rate schedule: linear warmup, then cosine decay to min_lr. tests/worker/
// torch_reference.py implements the same formula for the PyTorch comparison.
#pragma once

#include <cmath>
#include <numbers>
#include <string>

#include "common/job_spec.hpp"

namespace xtrain {

// Learning rate of optimizer step `step` (0-based), with W = warmup_steps, S = steps:
//   step <  W:  lr * (step + 1) / W                      (lr/W at step 0, lr at step W-1)
//   step >= W:  min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (step - W) / max(1, S - W)
// so the rate reaches min_lr at step S (p = 1) and stays there for any step beyond.
inline double learning_rate(const TrainSpec& t, long step) {
  if (step < t.warmup_steps) return t.lr * static_cast<double>(step + 1) / t.warmup_steps;
  const long decay_steps = t.steps - t.warmup_steps > 1 ? t.steps - t.warmup_steps : 1;
  double p = static_cast<double>(step - t.warmup_steps) / static_cast<double>(decay_steps);
  if (p > 1.0) p = 1.0;
  return t.min_lr + (t.lr - t.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

// What moving a run from schedule `then` to `now` after `done` completed steps does to the rates
// of the steps left, for a resume's log line: "step 11 takes a learning rate of 0.0005 (it was
// 0.001 on the old schedule)"; where the first step left keeps its rate (still warming up, or
// the first step of a decay), also the first step whose rate moves; else that none does.
std::string schedule_change(const TrainSpec& then, const TrainSpec& now, long done);

}  // namespace xtrain
