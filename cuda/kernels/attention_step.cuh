// A decoder's attention for one new position (Backend::attention_step): the position's q, k, v
// row goes into the KV cache at row P = *position, read on the device so that a recorded step
// replays at any position, then its q attends over the cache's rows [0, P].
//
// One block of kStepThreads per (sequence, head); every sum in a fixed order, no atomics:
//   1. the new row's head slices (q, k, v) into the cache, q also into shared memory as fp32;
//   2. one key per thread at a time: x_j = scale (q . k_j), the dot product in channel order,
//      into shared memory; the block's max (warps, then warps in index order);
//   3. p_j = exp(x_j - max) in place, and their sum likewise;
//   4. thread (group g, channels c..c+kVec): sum_j p_j v_j[c] over the keys j = g, g + groups, ...
//      into shared memory; then one thread per channel adds the groups in order, divides by the
//      sum and stores.
// The work is the cache's reads (2 (P+1) hs values a head): memory-bound, a few microseconds a
// layer at GPT-2's context. The rows move by 16-byte packs (kVec values) when every row of the
// cache and the new row are 16-byte aligned, as at every supported head size with aligned
// buffers; one value at a time otherwise, with the same sums.
#pragma once

#include <cmath>
#include <stdexcept>
#include <string>

#include "cuda/flash_attention.hpp"         // check_flash_attention_shape: the head sizes
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/flash_attention.cuh"  // flash::launch, flash::softmax_scale

namespace xtrain::cuda {

constexpr int kStepThreads = 256;
constexpr int kStepWarps = kStepThreads / kWarp;

// v reduced over the block by `warp_op` then warps in index order; every thread gets the result.
// `slots` (kStepWarps floats of shared memory) is free again when it returns.
template <class WarpOp, class Op>
__device__ inline float step_block_reduce(float v, float* slots, WarpOp warp_op, Op op) {
  v = warp_op(v);
  if (threadIdx.x % kWarp == 0) slots[threadIdx.x / kWarp] = v;
  __syncthreads();
  float r = slots[0];
  for (int w = 1; w < kStepWarps; ++w) r = op(r, slots[w]);
  __syncthreads();
  return r;
}

// Shared memory: q (hs), the groups' partial sums (kStepThreads * kVec), the reduction slots
// (kStepWarps), the scores (T).
inline size_t attention_step_smem_bytes(int T, int hs, int vec) {
  return (static_cast<size_t>(hs) + static_cast<size_t>(kStepThreads) * vec + kStepWarps + T) * sizeof(float);
}

// `cache` is not __restrict__: the block writes the new row through it and reads it back. Bounded
// at two blocks an SM, as the attention kernels are: without a number ptxas picks an occupancy
// target of its own, and for the fp32 instance on sm_80 it took 32 registers and spilled.
template <class T, int kVec>
__global__ void __launch_bounds__(kStepThreads, 2)
    attention_step_kernel(T* __restrict__ out, T* cache, const T* __restrict__ qkv,
                          const int32_t* __restrict__ position, int T_, int C, int NH, float scale) {
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  const int hs = C / NH, h = static_cast<int>(blockIdx.x) % NH, b = static_cast<int>(blockIdx.x) / NH, P = *position;
  float* q = reinterpret_cast<float*>(smem);       // (hs)
  float* partial = q + hs;                         // (groups, hs)
  float* slots = partial + kStepThreads * kVec;    // (kStepWarps)
  float* scores = slots + kStepWarps;              // (P + 1)
  const size_t row = 3 * static_cast<size_t>(C);
  T* seq = cache + static_cast<size_t>(b) * T_ * row;
  const T* fresh = qkv + static_cast<size_t>(b) * row;
  const int head = h * hs;

  for (int i = threadIdx.x; i < 3 * hs; i += kStepThreads) {
    const size_t c = static_cast<size_t>(i / hs) * C + head + i % hs;
    seq[static_cast<size_t>(P) * row + c] = fresh[c];
    if (i < hs) q[i] = load_f32(fresh[c]);
  }
  __syncthreads();  // the new key and value are read below, by other threads of the block

  float top = -INFINITY;
  for (int j = threadIdx.x; j <= P; j += kStepThreads) {
    const T* k = seq + static_cast<size_t>(j) * row + C + head;
    float x = 0.0f;
    for (int c = 0; c < hs; c += kVec) {
      float kv[kVec];
      load_values<kVec>(k + c, kv);
#pragma unroll
      for (int e = 0; e < kVec; ++e) x += q[c + e] * kv[e];
    }
    scores[j] = x * scale;
    top = fmaxf(top, scores[j]);
  }
  top = step_block_reduce(
      top, slots, [](float v) { return warp_max(v); }, [](float a, float c) { return fmaxf(a, c); });

  float sum = 0.0f;
  for (int j = threadIdx.x; j <= P; j += kStepThreads) {
    scores[j] = expf(scores[j] - top);
    sum += scores[j];
  }
  // Its barriers also order the writes of p above before the reads below.
  sum = step_block_reduce(sum, slots, [](float v) { return warp_sum(v); }, [](float a, float c) { return a + c; });

  const int packs = hs / kVec, groups = kStepThreads / packs;
  const int g = threadIdx.x / packs, c0 = (threadIdx.x % packs) * kVec;
  if (g < groups) {
    float acc[kVec] = {};
    for (int j = g; j <= P; j += groups) {
      float v[kVec];
      load_values<kVec>(seq + static_cast<size_t>(j) * row + 2 * C + head + c0, v);
#pragma unroll
      for (int e = 0; e < kVec; ++e) acc[e] += scores[j] * v[e];
    }
#pragma unroll
    for (int e = 0; e < kVec; ++e) partial[g * hs + c0 + e] = acc[e];
  }
  __syncthreads();
  for (int c = threadIdx.x; c < hs; c += kStepThreads) {
    float y = 0.0f;
    for (int gi = 0; gi < groups; ++gi) y += partial[gi * hs + c];
    out[static_cast<size_t>(b) * C + head + c] = store_as<T>(y / sum);
  }
}

// The shape as the flash attention's (its head sizes, so a model either both run or neither); the
// position is the device's, so its range is the caller's to keep (GPT::forward_step checks it).
template <class T>
void attention_step(cudaStream_t stream, T* out, T* cache, const T* qkv, const int32_t* position,
                    const AttentionShape& s) {
  check_flash_attention_shape(s);
  const int hs = s.hs();
  constexpr int kPack = Pack<T>::kCount;
  const bool vectorised = hs % kPack == 0 && s.C % kPack == 0 && aligned16(cache) && aligned16(qkv);
  const unsigned blocks = static_cast<unsigned>(s.B * s.NH);
  const float scale = flash::softmax_scale(s);
  if (vectorised) {
    flash::launch(attention_step_kernel<T, kPack>, blocks, kStepThreads, attention_step_smem_bytes(s.T, hs, kPack),
                  stream, out, cache, qkv, position, s.T, s.C, s.NH, scale);
  } else {
    flash::launch(attention_step_kernel<T, 1>, blocks, kStepThreads, attention_step_smem_bytes(s.T, hs, 1), stream, out,
                  cache, qkv, position, s.T, s.C, s.NH, scale);
  }
}

}  // namespace xtrain::cuda
