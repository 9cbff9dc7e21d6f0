// Faults on request, for the tests of restarts, hang reports, stragglers and root causes. Each
// comes from an environment variable and is off when it is unset; a malformed value is bad input
// (std::invalid_argument naming the variable). The one-off faults act in the first attempt only
// (XTRAIN_RESTART_COUNT 0), so a restarted attempt runs clean; a slow rank stays slow.
//
//   XTRAIN_FAULT_KILL="RANK:STEP"              rank RANK SIGKILLs itself when about to run STEP
//   XTRAIN_FAULT_EXIT="RANK:STEP:CODE[:LINGER_S]"  rank RANK fails with exit CODE at STEP; it closes
//                                              its connections at once but exits LINGER_S later,
//                                              as a rank whose teardown is slow
//   XTRAIN_FAULT_SLEEP="RANK:STEP:LAYER"       rank RANK sleeps (until killed) when its backward of
//                                              step STEP reaches layer LAYER
//   XTRAIN_FAULT_SLOW="RANK:FACTOR"            rank RANK takes FACTOR times as long for each
//                                              micro-step (it sleeps after computing)
//   XTRAIN_FAULT_FLIP="RANK:STEP"              rank RANK flips one bit of one parameter once they
//                                              are step STEP's (after its update; STEP 0, or the
//                                              step a run resumes at: before the replica check that
//                                              precedes the first step), as memory that changed
// Steps are 1-based.
#pragma once

#include <stdexcept>

namespace xtrain {

// Thrown by XTRAIN_FAULT_EXIT; the worker exits with `code` after `linger_s`.
class FaultExit : public std::runtime_error {
 public:
  FaultExit(const std::string& what, int code, double linger_s)
      : std::runtime_error(what), code(code), linger_s(linger_s) {}
  int code;
  double linger_s;
};

class FaultInjection {
 public:
  FaultInjection() = default;
  static FaultInjection from_environment(int restart_count);

  // Before step `step` runs: XTRAIN_FAULT_KILL (does not return), XTRAIN_FAULT_EXIT (throws).
  void at_step_start(int rank, long step) const;
  // When backward of step `step` reaches `layer`: XTRAIN_FAULT_SLEEP (does not return).
  void at_backward_layer(int rank, long step, int layer) const;
  // After a micro-step that took `compute_s`: XTRAIN_FAULT_SLOW's extra time.
  void after_micro_step(int rank, double compute_s) const;
  // Whether `rank` flips a parameter's bit once its parameters are step `step`'s (XTRAIN_FAULT_FLIP).
  bool flips_after_step(int rank, long step) const { return rank == flip_rank_ && step == flip_step_; }

 private:
  int kill_rank_ = -1;
  long kill_step_ = -1;
  int exit_rank_ = -1;
  long exit_step_ = -1;
  int exit_code_ = 0;
  double exit_linger_s_ = 0;
  int sleep_rank_ = -1;
  long sleep_step_ = -1;
  int sleep_layer_ = -1;
  int flip_rank_ = -1;
  long flip_step_ = -1;
  int slow_rank_ = -1;
  double slow_factor_ = 1;
};

}  // namespace xtrain
