// Helpers every kernel header uses: launch arithmetic, warp/block reductions whose order is
// fixed (xor shuffles, then warps in index order), so every reduction is deterministic, and the
// two storage types of activations.
//
// Storage: kernels that touch activations are templates on T, float or __nv_bfloat16. They load
// T as float (load_f32), compute and reduce in fp32, and store with store_as<T>: for bf16,
// __float2bfloat16_rn, round to nearest even, which worker/math/bf16.hpp reproduces bit for bit
// on the CPU. with_storage(dtype, f) calls f(T{}) with the T of a run-time DType.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels/portable.cuh"
#include "worker/model/act_ptr.hpp"

namespace xtrain {
template <>
struct DTypeOf<__nv_bfloat16> {
  static constexpr DType value = DType::bf16;
};
}  // namespace xtrain

namespace xtrain::cuda {

__device__ inline float load_f32(float x) { return x; }
__device__ inline float load_f32(__nv_bfloat16 x) { return __bfloat162float(x); }

template <class T>
__device__ inline T store_as(float x);
template <>
__device__ inline float store_as<float>(float x) {
  return x;
}
template <>
__device__ inline __nv_bfloat16 store_as<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

template <class F>
void with_storage(DType dtype, F&& f) {
  if (dtype == DType::bf16) {
    f(__nv_bfloat16{});
  } else {
    f(float{});
  }
}

// 16 bytes of T: the unit of vectorised loads and stores (4 floats, 8 bf16).
template <class T>
struct alignas(16) Pack {
  static constexpr int kCount = 16 / static_cast<int>(sizeof(T));
  T v[kCount];
};

constexpr int kWarp = 32;

inline unsigned blocks_for(size_t work, unsigned per_block) {
  return static_cast<unsigned>((work + per_block - 1) / per_block);
}

inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

template <class T>
__device__ inline T warp_sum(T v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

}  // namespace xtrain::cuda
