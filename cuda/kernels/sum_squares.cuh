// Deterministic sum of squares in double (the global gradient norm): a fixed grid of
// kSumSquaresBlocks blocks, whatever the GPU, each summing a fixed strided share into a
// fixed-order block tree; then one block adds the block sums in a fixed tree. The partition
// depends on n alone, so the bits are the same on every run and every GPU model.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/model/cuda_buffers.hpp"

namespace xtrain::cuda {

using cuda_buffers::kSumSquaresBlocks;  // worker/model/cuda_buffers.hpp: the memory plan counts the partials
constexpr int kSumSquaresThreads = 256;

// Tree over the block's threads in shared memory, in a fixed order.
__device__ inline double block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

__global__ void __launch_bounds__(kSumSquaresThreads)
    sum_squares_partials_kernel(double* __restrict__ partials, const float* __restrict__ x, size_t n) {
  XTRAIN_SHARED(double, shared, [kSumSquaresThreads]);
  const size_t stride = static_cast<size_t>(kSumSquaresBlocks) * kSumSquaresThreads;
  double acc = 0.0;
  for (size_t i = static_cast<size_t>(blockIdx.x) * kSumSquaresThreads + threadIdx.x; i < n; i += stride) {
    const double xi = x[i];
    acc += xi * xi;
  }
  const double s = block_sum(acc, shared);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumSquaresThreads) sum_squares_final_kernel(double* __restrict__ result,
                                                                              const double* __restrict__ partials) {
  XTRAIN_SHARED(double, shared, [kSumSquaresThreads]);
  double acc = 0.0;
  for (int i = threadIdx.x; i < kSumSquaresBlocks; i += kSumSquaresThreads) acc += partials[i];
  const double s = block_sum(acc, shared);
  if (threadIdx.x == 0) *result = s;
}

// partials: kSumSquaresBlocks + 1 doubles; the sum lands in partials[kSumSquaresBlocks].
inline void sum_squares(cudaStream_t stream, double* partials, const float* x, size_t n) {
  launch_kernel(sum_squares_partials_kernel, kSumSquaresBlocks, kSumSquaresThreads, 0, stream, partials, x, n);
  launch_kernel(sum_squares_final_kernel, 1, kSumSquaresThreads, 0, stream, partials + kSumSquaresBlocks, partials);
}

}  // namespace xtrain::cuda
