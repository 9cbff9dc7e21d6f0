#include "common/cuda_interpret.hpp"

#include <cstdlib>
#include <string>

#include "common/job_spec.hpp"

namespace xtrain {

bool cuda_interpret_requested() {
  const char* value = std::getenv(kCudaInterpretVariable);
  if (value == nullptr || *value == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw SpecError(kCudaInterpretVariable, std::string("expected 1 (interpret mode) or 0, got \"") + value + "\"");
}

}  // namespace xtrain
