// The switch that asks for CUDA interpret mode (cuda/interp/: the CUDA backend's own code run on
// the CPU, kernels included): XTRAIN_CUDA_INTERPRET=1 in the environment of xlaunch (its ranks
// inherit it) or of xtrain-worker. With it, device "cuda" needs no GPU, the worker loads
// lib/libxtrain-cuda-interp.so instead of lib/libxtrain-cuda.so, and ranks reduce with Gloo, or
// with interpret mode's NCCL when the spec asks for it.
#pragma once

#include <cstddef>

inline constexpr char kCudaInterpretVariable[] = "XTRAIN_CUDA_INTERPRET";
inline constexpr char kCudaInterpretPluginFileName[] = "libxtrain-cuda-interp.so";
inline constexpr char kInterpSchedulesVariable[] = "XTRAIN_INTERP_SCHEDULES";
inline constexpr char kInterpDeviceMibVariable[] = "XTRAIN_INTERP_DEVICE_MIB";

namespace xtrain {

// Interpret mode's settings (docs/interpret-mode.md), from the environment; unset or empty is
// the default.
struct InterpretSettings {
  int schedules = 3;                // XTRAIN_INTERP_SCHEDULES: how many schedules every launch runs under
  std::size_t device_mib = 143771;  // XTRAIN_INTERP_DEVICE_MIB: the emulated device's memory, an H200's
};
inline constexpr int kMaxInterpSchedules = 64;
inline constexpr std::size_t kMaxInterpDeviceMib = std::size_t{1} << 20;  // the 1 TiB of address space interpret mode reserves

// SpecError naming the variable for a value that is not a whole number in its range, so that a
// typo in a test's setting is an error, not the default.
InterpretSettings interpret_settings();

// True for "1", false when unset, empty or "0"; SpecError naming the variable for anything else.
// When true, interpret_settings() is checked too, so that xlaunch and the worker refuse a bad
// setting before any rank starts or any plugin loads.
bool cuda_interpret_requested();

}  // namespace xtrain
