// Fused AdamW: one pass reads params, grads, m, v and writes params, m, v (28 bytes per
// parameter, the minimum) and, in bf16 precision, the weights' bf16 copy (2 more). The clip
// scale arrives in AdamWHyper::grad_scale, so clipping costs no extra pass. The per-element
// update is worker/math/adamw.hpp's, shared with the CPU.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/adamw.hpp"

namespace xtrain::cuda {

// weights: the copy to refresh, or nullptr.
template <class T>
__global__ void adamw_kernel(float* __restrict__ params, T* __restrict__ weights, const float* __restrict__ grads,
                             float* __restrict__ m, float* __restrict__ v, size_t n, AdamWHyper h) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float mi = m[i], vi = v[i];
  const float p = math::adamw_element(params[i], grads[i], mi, vi, h);
  params[i] = p;
  m[i] = mi;
  v[i] = vi;
  if (weights != nullptr) weights[i] = store_as<T>(p);
}

template <class T>
void adamw_update(cudaStream_t stream, float* params, T* weights, const float* grads, float* m, float* v, size_t n,
                  const AdamWHyper& h) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  launch_kernel(adamw_kernel<T>, blocks_for(n, kThreads), kThreads, 0, stream, params, weights, grads, m, v, n, h);
}

}  // namespace xtrain::cuda
