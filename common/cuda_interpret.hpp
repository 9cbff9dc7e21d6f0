// The switch that asks for CUDA interpret mode (cuda/interp/: the CUDA backend's own code run on
// the CPU, kernels included): XTRAIN_CUDA_INTERPRET=1 in the environment of xlaunch (its ranks
// inherit it) or of xtrain-worker. With it, device "cuda" needs no GPU, the worker loads
// lib/libxtrain-cuda-interp.so instead of lib/libxtrain-cuda.so, and ranks reduce with Gloo.
#pragma once

inline constexpr char kCudaInterpretVariable[] = "XTRAIN_CUDA_INTERPRET";
inline constexpr char kCudaInterpretPluginFileName[] = "libxtrain-cuda-interp.so";

namespace xtrain {

// True for "1", false when unset, empty or "0"; SpecError naming the variable for anything else.
bool cuda_interpret_requested();

}  // namespace xtrain
