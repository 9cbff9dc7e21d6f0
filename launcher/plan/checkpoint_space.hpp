// Whether the run dir's file system has room for the checkpoints a run will write, said before any
// rank starts: a checkpoint that meets a full disk fails the run (exit 1) hours in, where this
// knows it in the plan. A warning, not an error: free space changes under a job, and a quota may
// bind before the file system fills.
#pragma once

#include <cstdint>

#include "launcher/plan/plan.hpp"

namespace xtrain::launcher {

// The checkpoints a run from step `start` to `steps` writes: one at each multiple of `every`
// (0: none) and one at `steps`.
std::int64_t checkpoints_written(std::int64_t start, std::int64_t steps, int every);

// How many checkpoints more than the `existing` ones the run dir holds while the run writes its
// k-th (1-based): each new one is written whole before checkpoint.keep's rotation removes the
// oldest, so up to keep + 1 at once.
std::int64_t new_checkpoints_at(std::int64_t k, std::int64_t existing, int keep);

// The step of the k-th checkpoint (1-based) of a run from `start` to `steps`.
std::int64_t checkpoint_step_of(std::int64_t k, std::int64_t start, std::int64_t steps, int every);

// Node 0, our worker: one warning line when the free space of the run dir's file system is less
// than the peak's need.
void warn_about_checkpoint_space(const Plan& plan);

}  // namespace xtrain::launcher
