#include "common/cuda_interpret.hpp"

#include <cstdlib>
#include <string>

#include "common/job_spec.hpp"

namespace xtrain {

namespace {

// The variable's value as a whole number in [1, max], or `fallback` when it is unset or empty.
std::size_t whole_number_setting(const char* variable, std::size_t max, std::size_t fallback) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return fallback;
  const std::string text = value;
  const bool digits = text.size() <= 19 && text.find_first_not_of("0123456789") == std::string::npos;
  const std::size_t n = digits ? std::stoull(text) : 0;
  if (!digits || n < 1 || n > max)
    throw SpecError(variable, "expected a whole number from 1 to " + std::to_string(max) + ", got \"" + text + "\"");
  return n;
}

}  // namespace

InterpretSettings interpret_settings() {
  const InterpretSettings defaults;
  InterpretSettings s;
  s.schedules = static_cast<int>(whole_number_setting(kInterpSchedulesVariable, kMaxInterpSchedules, defaults.schedules));
  s.device_mib = whole_number_setting(kInterpDeviceMibVariable, kMaxInterpDeviceMib, defaults.device_mib);
  return s;
}

bool cuda_interpret_requested() {
  const char* value = std::getenv(kCudaInterpretVariable);
  if (value == nullptr || *value == '\0' || std::string(value) == "0") return false;
  if (std::string(value) != "1")
    throw SpecError(kCudaInterpretVariable, std::string("expected 1 (interpret mode) or 0, got \"") + value + "\"");
  interpret_settings();
  return true;
}

}  // namespace xtrain
