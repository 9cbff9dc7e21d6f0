// XTRAIN_HD marks the per-element and per-row math that the CPU backend and the CUDA kernels
// share, so the CPU tests cover the arithmetic both backends run.
#pragma once

#ifdef __CUDACC__
#define XTRAIN_HD __host__ __device__
#else
#define XTRAIN_HD
#endif

// Marks pointer arguments that never overlap, so that loops writing several outputs vectorise
// without run-time overlap checks (GCC, Clang and nvcc all accept __restrict__).
#define XTRAIN_RESTRICT __restrict__
