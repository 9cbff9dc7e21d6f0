// Interpret mode: what a kernel did that a GPU would fault on, hang on, or compute wrongly without
// saying so. The message names the kernel, the block and the thread (executor.hpp adds them).
#pragma once

#include <stdexcept>
#include <string>

#include "driver_types.h"

namespace xtrain::interp {

class KernelFault : public std::runtime_error {
 public:
  // `code`: what the runtime reports afterwards (cudaErrorIllegalAddress for a bad address, as a
  // GPU does; cudaErrorLaunchFailure for races, barriers and collectives, which a GPU may not
  // report at all).
  KernelFault(cudaError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  cudaError_t code() const { return code_; }

 private:
  cudaError_t code_;
};

}  // namespace xtrain::interp
