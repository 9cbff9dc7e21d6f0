// An error that stops xlaunch before the job could run, carrying the exit code it maps to
// (common/exit_codes.hpp). Spec problems are xtrain::SpecError instead (exit 2).
#pragma once

#include <stdexcept>
#include <string>

#include "common/exit_codes.hpp"

namespace xtrain::launcher {

class LaunchError : public std::runtime_error {
 public:
  LaunchError(int exit_code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// The job could not be launched: exit 125.
[[noreturn]] inline void launch_failure(const std::string& message) {
  throw LaunchError(exit_code::kLaunchFailure, message);
}

}  // namespace xtrain::launcher
