#include "worker/train/fault_injection.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

namespace xtrain {
namespace {

[[noreturn]] void malformed(const char* name, const char* expected, const char* value) {
  throw std::invalid_argument(std::string(name) + ": expected " + expected + ", got \"" + value + "\"");
}

// The variable's value, or nullptr when it is unset or empty.
const char* fault_variable(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

FaultInjection FaultInjection::from_environment(int restart_count) {
  FaultInjection f;
  char tail = 0;
  if (const char* v = fault_variable("XTRAIN_FAULT_SLOW")) {
    if (std::sscanf(v, "%d:%lf%c", &f.slow_rank_, &f.slow_factor_, &tail) != 2 || f.slow_rank_ < 0 ||
        !(f.slow_factor_ >= 1)) {
      malformed("XTRAIN_FAULT_SLOW", "RANK:FACTOR with FACTOR >= 1", v);
    }
  }
  if (restart_count != 0) return f;
  if (const char* v = fault_variable("XTRAIN_FAULT_KILL")) {
    if (std::sscanf(v, "%d:%ld%c", &f.kill_rank_, &f.kill_step_, &tail) != 2 || f.kill_rank_ < 0 || f.kill_step_ < 1) {
      malformed("XTRAIN_FAULT_KILL", "RANK:STEP", v);
    }
  }
  if (const char* v = fault_variable("XTRAIN_FAULT_EXIT")) {
    const int n = std::sscanf(v, "%d:%ld:%d:%lf%c", &f.exit_rank_, &f.exit_step_, &f.exit_code_, &f.exit_linger_s_, &tail);
    if ((n != 3 && n != 4) || f.exit_rank_ < 0 || f.exit_step_ < 1 || f.exit_code_ < 1 || f.exit_code_ > 255 ||
        f.exit_linger_s_ < 0) {
      malformed("XTRAIN_FAULT_EXIT", "RANK:STEP:CODE[:LINGER_S] with CODE in 1..255", v);
    }
  }
  if (const char* v = fault_variable("XTRAIN_FAULT_SLEEP")) {
    if (std::sscanf(v, "%d:%ld:%d%c", &f.sleep_rank_, &f.sleep_step_, &f.sleep_layer_, &tail) != 3 ||
        f.sleep_rank_ < 0 || f.sleep_step_ < 1 || f.sleep_layer_ < 0) {
      malformed("XTRAIN_FAULT_SLEEP", "RANK:STEP:LAYER", v);
    }
  }
  if (const char* v = fault_variable("XTRAIN_FAULT_FLIP")) {
    if (std::sscanf(v, "%d:%ld%c", &f.flip_rank_, &f.flip_step_, &tail) != 2 || f.flip_rank_ < 0 || f.flip_step_ < 0) {
      malformed("XTRAIN_FAULT_FLIP", "RANK:STEP", v);
    }
  }
  return f;
}

void FaultInjection::at_step_start(int rank, long step) const {
  if (rank == kill_rank_ && step == kill_step_) {
    spdlog::warn("XTRAIN_FAULT_KILL: rank {} kills itself at step {}", rank, step);
    std::raise(SIGKILL);
  }
  if (rank == exit_rank_ && step == exit_step_) {
    throw FaultExit("XTRAIN_FAULT_EXIT: rank " + std::to_string(rank) + " fails at step " + std::to_string(step) +
                        " with exit code " + std::to_string(exit_code_),
                    exit_code_, exit_linger_s_);
  }
}

void FaultInjection::at_backward_layer(int rank, long step, int layer) const {
  if (rank != sleep_rank_ || step != sleep_step_ || layer != sleep_layer_) return;
  spdlog::warn("XTRAIN_FAULT_SLEEP: rank {} sleeps in backward layer {} of step {}", rank, layer, step);
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

void FaultInjection::after_micro_step(int rank, double compute_s) const {
  if (rank != slow_rank_) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(compute_s * (slow_factor_ - 1)));
}

}  // namespace xtrain
