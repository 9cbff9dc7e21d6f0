// Fused AdamW: one pass reads params, grads, m, v and writes params, m, v (28 bytes per
// parameter, the minimum). The clip scale arrives in AdamWHyper::grad_scale, so clipping costs
// no extra pass. The per-element update is worker/math/adamw.hpp's, shared with the CPU.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/adamw.hpp"

namespace xtrain::cuda {

__global__ void adamw_kernel(float* __restrict__ params, const float* __restrict__ grads, float* __restrict__ m,
                             float* __restrict__ v, size_t n, AdamWHyper h) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float mi = m[i], vi = v[i];
  params[i] = math::adamw_element(params[i], grads[i], mi, vi, h);
  m[i] = mi;
  v[i] = vi;
}

inline void adamw_update(cudaStream_t stream, float* params, const float* grads, float* m, float* v, size_t n,
                         const AdamWHyper& h) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  adamw_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(params, grads, m, v, n, h);
  XTRAIN_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
