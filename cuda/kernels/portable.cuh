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
//   ldmatrix_x4(r, row) / ldmatrix_x4_trans(r, row)                ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16
//   cp_async_16(dst, src, src_bytes)                               cp.async.cg.shared.global [dst], [src], 16, src_bytes
//   cp_async_commit() / cp_async_wait<N>()                         cp.async.commit_group / cp.async.wait_group N
//   atomic_add_pair(p, a, b)                                       sm_90: one float2 atomicAdd (red.v2.f32);
//                                                                  before, and in interpret mode: two atomicAdds
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

// Four 8x8 matrices of 16-bit elements from shared memory: lane L gives the address of row L % 8
// of matrix L / 8 (16-byte aligned), and register m receives lane L's fragment of matrix m:
// elements 2(L % 4) and 2(L % 4) + 1 of row L / 4 (low half first), or with .trans of column L / 4
// (the matrix read column-major). Warp-collective: every lane of the warp executes it.
// No "memory" clobber: our kernels only read shared memory this way after a __syncthreads, which
// the compiler does not move loads across.
template <bool TRANS>
__device__ inline void ldmatrix_x4_impl(uint32_t (&r)[4], const void* row) {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::ldmatrix_lane<4, TRANS>(r, row);
#else
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  }
#endif
}
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl<false>(r, row); }
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) { ldmatrix_x4_impl<true>(r, row); }

// 16 bytes from global to shared memory, asynchronously (sm_80+; both addresses 16-byte
// aligned): the first src_bytes (0 or 16 in our kernels) from src, the rest zero, so a row past
// the end of a tensor is zero-filled without a branch around the copy. The bytes are not there,
// not even for this thread, until a cp_async_wait that covers the copy's group; other threads
// see them after this thread's wait and a __syncthreads.
__device__ inline void cp_async_16(void* dst, const void* src, int src_bytes) {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::async_copy_16(dst, src, src_bytes);
#else
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
#endif
}
// Closes this thread's open group of copies.
__device__ inline void cp_async_commit() {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::async_commit();
#else
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N of this thread's committed groups are pending (groups complete in
// commit order). "memory": no shared load of the copied bytes may move above the wait.
template <int N>
__device__ inline void cp_async_wait() {
#if defined(XTRAIN_CUDA_INTERPRET)
  ::xtrain::interp::async_wait(N);
#else
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

// p[0] += a and p[1] += b, each atomically (p 8-byte aligned). On sm_90 one vector atomic, half
// the atomic operations through L2; the same two fp32 adds either way, each landing whole.
__device__ inline void atomic_add_pair(float* p, float a, float b) {
#if !defined(XTRAIN_CUDA_INTERPRET) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

}  // namespace xtrain::cuda
