#include "worker/cpu/openblas_core.hpp"

#include <cblas.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <spdlog/spdlog.h>

namespace xtrain {

CpuFeatures CpuFeatures::of_this_cpu() {
  // GCC's checks include the OS's: AVX-512 counts only where XCR0 says its registers are saved.
  __builtin_cpu_init();
  CpuFeatures f;
  f.avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
  return f;
}

std::string openblas_core_to_choose(const std::string& core, const std::string& config, const char* user_setting,
                                    CpuFeatures cpu) {
  if (user_setting != nullptr || core != "Prescott" || config.find("DYNAMIC_ARCH") == std::string::npos) return "";
  if (cpu.avx512) return "SkylakeX";
  if (cpu.avx2_fma) return "Haswell";
  return "";
}

namespace {
constexpr const char* kChoiceVariable = "XTRAIN_OPENBLAS_CHOICE";
}

std::string choose_openblas_core(char** argv) {
  if (const char* chosen = std::getenv(kChoiceVariable)) {  // the image executed below
    const std::string line = chosen;
    ::unsetenv(kChoiceVariable);
    return line;
  }
  const CpuFeatures cpu = CpuFeatures::of_this_cpu();
  const std::string config = openblas_get_config();
  const std::string core = openblas_core_to_choose(openblas_get_corename(), config,
                                                   std::getenv("OPENBLAS_CORETYPE"), cpu);
  if (core.empty()) return "";
  // "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH ...": the name and version are the first two words.
  const std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
  const std::string line = version + " does not know this CPU and would run its Prescott kernels (SSE3, no FMA); " +
                           "the CPU has " + (cpu.avx512 ? "AVX-512" : "AVX2 and FMA") +
                           ": running with OPENBLAS_CORETYPE=" + core + " (set OPENBLAS_CORETYPE to choose)";
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::setenv(kChoiceVariable, line.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  const int error = errno;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kChoiceVariable);
  spdlog::warn("OpenBLAS: could not execute this program again with OPENBLAS_CORETYPE={} ({}); going on with "
               "the Prescott kernels",
               core, std::strerror(error));
  return "";
}

}  // namespace xtrain
