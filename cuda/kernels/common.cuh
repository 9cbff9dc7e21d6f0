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

// One 16-byte access: p must be 16-byte aligned. Values cross as fp32 (load_f32, store_as).
template <class T>
__device__ inline void load_pack(const T* p, float (&out)[Pack<T>::kCount]) {
  const Pack<T> x = *reinterpret_cast<const Pack<T>*>(p);
#pragma unroll
  for (int j = 0; j < Pack<T>::kCount; ++j) out[j] = load_f32(x.v[j]);
}
template <class T>
__device__ inline void store_pack(T* p, const float (&in)[Pack<T>::kCount]) {
  Pack<T> y;
#pragma unroll
  for (int j = 0; j < Pack<T>::kCount; ++j) y.v[j] = store_as<T>(in[j]);
  *reinterpret_cast<Pack<T>*>(p) = y;
}

// kN fp32 values (a multiple of 4) by 16-byte accesses, for kernels whose unit is a pack of a
// narrower type (8 bf16 against 8 floats: two float packs). p must be 16-byte aligned.
template <int kN>
__device__ inline void load_floats(const float* p, float (&out)[kN]) {
  static_assert(kN % 4 == 0, "whole float packs");
#pragma unroll
  for (int q = 0; q < kN / 4; ++q) {
    const Pack<float> x = reinterpret_cast<const Pack<float>*>(p)[q];
#pragma unroll
    for (int j = 0; j < 4; ++j) out[4 * q + j] = x.v[j];
  }
}
template <int kN>
__device__ inline void store_floats(float* p, const float (&in)[kN]) {
  static_assert(kN % 4 == 0, "whole float packs");
#pragma unroll
  for (int q = 0; q < kN / 4; ++q) {
    Pack<float> y;
#pragma unroll
    for (int j = 0; j < 4; ++j) y.v[j] = in[4 * q + j];
    reinterpret_cast<Pack<float>*>(p)[q] = y;
  }
}

// kVec consecutive values at p as fp32: one element (kVec 1) or by 16-byte accesses (p aligned;
// kVec one pack of T, or for fp32 any multiple of 4).
template <int kVec, class T>
__device__ inline void load_values(const T* p, float (&out)[kVec]) {
  if constexpr (kVec == 1) {
    out[0] = load_f32(*p);
  } else if constexpr (sizeof(T) == sizeof(float)) {
    load_floats(p, out);
  } else {
    load_pack(p, out);
  }
}
template <int kVec>
__device__ inline void store_values(float* p, const float (&in)[kVec]) {
  if constexpr (kVec == 1) {
    *p = in[0];
  } else {
    store_floats(p, in);
  }
}

// x as T stores it, back in fp32 (in bf16: rounded once; in fp32: x).
template <class T>
__device__ inline float rounded_as(float x) {
  return load_f32(store_as<T>(x));
}

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
