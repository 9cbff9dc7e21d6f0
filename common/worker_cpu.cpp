#include "common/worker_cpu.hpp"

#include <utility>

namespace xtrain {

std::vector<std::string> missing_worker_cpu_features() {
  __builtin_cpu_init();
  // __builtin_cpu_supports takes only literals: one row per feature.
  const std::pair<const char*, bool> features[] = {
      {"AVX", __builtin_cpu_supports("avx") != 0},     {"AVX2", __builtin_cpu_supports("avx2") != 0},
      {"FMA", __builtin_cpu_supports("fma") != 0},     {"F16C", __builtin_cpu_supports("f16c") != 0},
      {"BMI1", __builtin_cpu_supports("bmi") != 0},    {"BMI2", __builtin_cpu_supports("bmi2") != 0},
      {"LZCNT", __builtin_cpu_supports("lzcnt") != 0}, {"MOVBE", __builtin_cpu_supports("movbe") != 0},
  };
  std::vector<std::string> missing;
  for (const auto& [name, present] : features) {
    if (!present) missing.emplace_back(name);
  }
  return missing;
}

std::string describe_missing_cpu_features(const std::vector<std::string>& missing) {
  std::string names;
  for (size_t i = 0; i < missing.size(); ++i) {
    names += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  }
  return "this CPU lacks " + names +
         ", which xtrain-worker is built for (x86-64-v3: Intel Haswell, AMD Excavator and newer); on a virtual "
         "machine, give it the host's CPU model (QEMU/KVM: -cpu host) instead of a generic one";
}

}  // namespace xtrain
