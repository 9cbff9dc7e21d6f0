// Which kernels OpenBLAS runs. A DYNAMIC_ARCH OpenBLAS (Debian's) picks them from the CPU's family
// and model when it loads; a CPU newer than its tables gets its fallback, "Prescott": SSE3 kernels
// without FMA. OpenBLAS 0.3.21 does that on an Intel Xeon of family 6 model 207 (Emerald Rapids),
// and its sgemm there runs at 16 GFLOP/s against 79 with the AVX-512 kernels the CPU can run
// (docs/PERF.md, "CPU worker"): matrix products are most of a training step. The one way to choose
// is OPENBLAS_CORETYPE, read once while the library loads, before main runs. So xtrain-worker, as
// the first thing it does, sets it and executes itself again (same pid, same arguments); the
// user's own OPENBLAS_CORETYPE always wins, and the choice is one log line.
#pragma once

#include <string>

namespace xtrain {

struct CpuFeatures {
  bool avx2_fma = false;  // Haswell's kernels
  bool avx512 = false;    // F, CD, BW, DQ and VL with the OS saving their registers: Skylake-X's

  static CpuFeatures of_this_cpu();
};

// The OPENBLAS_CORETYPE to run with, or "" to keep OpenBLAS's choice. A core is chosen only where
// OpenBLAS fell back to "Prescott" (`core`, openblas_get_corename()) on a CPU that has AVX2 and FMA,
// the library can change its kernels (`config`, openblas_get_config(), says DYNAMIC_ARCH), and the
// user set no OPENBLAS_CORETYPE (`user_setting` null; any value, even empty, is the user's).
std::string openblas_core_to_choose(const std::string& core, const std::string& config, const char* user_setting,
                                    CpuFeatures cpu);

// Call at the start of main, before anything is opened or written. When openblas_core_to_choose
// names a core for this process: executes /proc/self/exe with `argv`, OPENBLAS_CORETYPE set and
// XTRAIN_OPENBLAS_CHOICE telling the new image what was chosen. Returns the line to log once: in
// that new image, what OpenBLAS would have run, what the CPU has and what runs instead (the
// variable is then removed, so nothing started later inherits it); otherwise "". The caller logs
// it where it logs the device, so that a failure before that stays one error line. If the exec
// fails, logs a warning and returns "": the run goes on with OpenBLAS's own kernels.
std::string choose_openblas_core(char** argv);

}  // namespace xtrain
