// The few spellings in which a kernel's source differs between nvcc and interpret mode
// (cuda/interp/, the same sources compiled by the host compiler): a launch, a shared-memory
// declaration and the warp-level matrix instructions. Everything else in cuda/kernels/ is the
// same text for both compilers.
//
//   launch_kernel(k, grid, block, shared_bytes, stream, args...)   k<<<grid, block, shared_bytes, stream>>>(args...),
//                                                                  then the launch check
//   XTRAIN_SHARED(float, tile, [R][C]);                            __shared__ float tile[R][C];
//   XTRAIN_DYNAMIC_SHARED(unsigned char, smem);                    extern __shared__ __align__(16) unsigned char smem[];
//   mma_m16n8k16_bf16(d, a, b)                                     mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "cuda/check.hpp"

#if defined(XTRAIN_CUDA_INTERPRET)
#include "cuda/interp/warp_matrix_lanes.hpp"
#else
#define XTRAIN_SHARED(type, name, dims) __shared__ type name dims
#define XTRAIN_DYNAMIC_SHARED(type, name) extern __shared__ __align__(16) type name[]
#endif

namespace xtrain::cuda {

template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::launch(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream,
                           std::make_shared<const ::xtrain::interp::KernelCall<Params...>>(kernel, std::forward<Args>(args)...));
#else
  kernel<<<grid, block, shared_bytes, stream>>>(std::forward<Args>(args)...);
#endif
  XTRAIN_LAUNCH_CHECK();
}

// d += A B for one warp's 16x16 (A, row-major) by 16x8 (B, column-major) bf16 tile, fp32
// accumulators: the fragment layouts of the PTX ISA's "Matrix Fragments for mma.m16n8k16".
__device__ inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::mma_m16n8k16_bf16_lane(d, a, b);
#else
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

}  // namespace xtrain::cuda
