// The CPU that xtrain-worker needs. Its CPU backend (worker/cpu/) is compiled for x86-64-v3:
// AVX, AVX2, FMA, F16C, BMI1, BMI2, LZCNT and MOVBE (Intel Haswell, AMD Excavator and newer). GCC
// may use them in any function that room instantiates, and the linker keeps one copy of each
// inline function for the whole program, so on a CPU without them the worker would die of SIGILL
// wherever such a copy first runs. Both programs ask first instead: xlaunch before any rank starts
// (exit 126, the worker cannot execute here) and the worker before anything else (exit 2).
// This file is compiled for plain x86-64, as every caller of it must be.
#pragma once

#include <string>
#include <vector>

namespace xtrain {

// The x86-64-v3 features this CPU lacks, by name ("AVX2", "FMA"), where the operating system's
// support counts too (AVX's registers saved on a context switch); empty where it has them all.
std::vector<std::string> missing_worker_cpu_features();

// One sentence for an error where `missing` is not empty: what is missing, what the worker
// needs, and the usual cause (a virtual machine's generic CPU model).
std::string describe_missing_cpu_features(const std::vector<std::string>& missing);

}  // namespace xtrain
