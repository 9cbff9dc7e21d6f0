// Fused AdamW: one pass reads params, grads, m, v and writes params, m, v (28 bytes per
// parameter, the minimum) and, in bf16 precision, the weights' bf16 copy (2 more). The clip
// scale arrives in AdamWHyper::grad_scale, so clipping costs no extra pass. The per-element
// update is worker/math/adamw.hpp's, shared with the CPU.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/adamw.hpp"

namespace xtrain::cuda {

// weights: the copy to refresh, or nullptr. A thread updates one pack of T's width (8 parameters
// for bf16 weights, 4 otherwise) by 16-byte accesses when every pointer is 16-byte aligned, element
// by element otherwise and in the tail.
template <class T>
__global__ void adamw_kernel(float* __restrict__ params, T* __restrict__ weights, const float* __restrict__ grads,
                             float* __restrict__ m, float* __restrict__ v, size_t n, AdamWHyper h, bool vectorised) {
  constexpr int kPer = Pack<T>::kCount;
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (i >= n) return;
  if (vectorised && i + kPer <= n) {
    float p[kPer], g[kPer], mi[kPer], vi[kPer];
    load_floats(params + i, p);
    load_floats(grads + i, g);
    load_floats(m + i, mi);
    load_floats(v + i, vi);
#pragma unroll
    for (int j = 0; j < kPer; ++j) p[j] = math::adamw_element(p[j], g[j], mi[j], vi[j], h);
    store_floats(params + i, p);
    store_floats(m + i, mi);
    store_floats(v + i, vi);
    if (weights != nullptr) store_pack(weights + i, p);
    return;
  }
  const size_t end = i + kPer < n ? i + kPer : n;
  for (size_t j = i; j < end; ++j) {
    float mj = m[j], vj = v[j];
    const float p = math::adamw_element(params[j], grads[j], mj, vj, h);
    params[j] = p;
    m[j] = mj;
    v[j] = vj;
    if (weights != nullptr) weights[j] = store_as<T>(p);
  }
}

template <class T>
void adamw_update(cudaStream_t stream, float* params, T* weights, const float* grads, float* m, float* v, size_t n,
                  const AdamWHyper& h) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  constexpr size_t kPer = Pack<T>::kCount;
  const bool vectorised = aligned16(params) && aligned16(grads) && aligned16(m) && aligned16(v) &&
                          (weights == nullptr || aligned16(weights));
  launch_kernel(adamw_kernel<T>, blocks_for((n + kPer - 1) / kPer, kThreads), kThreads, 0, stream, params, weights,
                grads, m, v, n, h, vectorised);
}

}  // namespace xtrain::cuda
