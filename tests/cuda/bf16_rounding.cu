#include "tests/cuda/bf16_rounding.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda/check.hpp"
#include "cuda/kernels/portable.cuh"
#include "worker/math/bf16.hpp"

namespace xtrain::test {
namespace {

// Thread i checks the patterns i, i + stride, ... up to 2^32; integer atomics only (exact).
__global__ void compare_kernel(unsigned long long* count, unsigned int* first) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long b = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       b < (1ull << 32); b += stride) {
    const float x = __uint_as_float(static_cast<unsigned int>(b));
    const unsigned short hw = __bfloat16_as_ushort(__float2bfloat16_rn(x));
    if (hw != math::bf16_bits_from_float(x)) {
      atomicAdd(count, 1ull);
      atomicMin(first, static_cast<unsigned int>(b));
    }
  }
}

}  // namespace

Bf16RoundingMismatches bf16_rounding_mismatches_on_gpu() {
  unsigned long long* count = nullptr;
  unsigned int* first = nullptr;
  XTRAIN_CUDA_CHECK(cudaMalloc(&count, sizeof *count));
  XTRAIN_CUDA_CHECK(cudaMalloc(&first, sizeof *first));
  XTRAIN_CUDA_CHECK(cudaMemset(count, 0, sizeof *count));
  XTRAIN_CUDA_CHECK(cudaMemset(first, 0xFF, sizeof *first));
  cuda::launch_kernel(compare_kernel, 4096, 256, 0, nullptr, count, first);
  Bf16RoundingMismatches out;
  XTRAIN_CUDA_CHECK(cudaMemcpy(&out.count, count, sizeof *count, cudaMemcpyDeviceToHost));
  XTRAIN_CUDA_CHECK(cudaMemcpy(&out.first, first, sizeof *first, cudaMemcpyDeviceToHost));
  cudaFree(count);
  cudaFree(first);
  return out;
}

}  // namespace xtrain::test
