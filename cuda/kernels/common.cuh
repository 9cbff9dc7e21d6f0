// Helpers every kernel header uses: launch arithmetic and warp/block reductions whose order is
// fixed (xor shuffles, then warps in index order), so every reduction is deterministic.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace xtrain::cuda {

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
