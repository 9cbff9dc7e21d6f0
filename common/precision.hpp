// How training computes (the spec's train.precision, resolved for the device; the Backend carries
// it, so it crosses the CUDA plugin's boundary):
//   fp32  everything in fp32;
//   tf32  fp32 storage, matrix products on TF32 tensor cores (CUDA only);
//   bf16  mixed precision: fp32 master weights, gradients and optimizer state; activations and
//         a copy of the weights in bf16 for every operation; reductions in fp32. The CPU
//         emulates it, rounding to bf16 wherever the GPU stores bf16.
#pragma once

namespace xtrain {

enum class Precision { fp32, tf32, bf16 };

constexpr const char* precision_name(Precision p) {
  return p == Precision::bf16 ? "bf16" : p == Precision::tf32 ? "tf32" : "fp32";
}

}  // namespace xtrain
