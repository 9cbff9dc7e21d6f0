// Fused softmax + cross-entropy + gradient over a padded vocabulary, one block per row:
//   pass 1: each thread streams its strided share of the V real logits through an online
//           (max, sum) accumulator (math::OnlineSoftmax); the block merges them in a fixed order;
//   pass 2: the row is overwritten by dloss * (p - onehot(target)), 0 in the padding.
// The normalised probabilities are never stored: the row is read twice and written once, by
// 16-byte accesses where the row is aligned. The logits and their gradient are T (float or bf16);
// the softmax and the loss are fp32.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/softmax.hpp"

namespace xtrain::cuda {

constexpr int kCrossEntropyThreads = 512;

__device__ inline math::OnlineSoftmax warp_merge(math::OnlineSoftmax a) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const math::OnlineSoftmax b{__shfl_xor_sync(0xffffffffu, a.max, offset),
                                __shfl_xor_sync(0xffffffffu, a.sum, offset)};
    a = math::online_softmax_merge(a, b);
  }
  return a;
}

// vectorised: logits 16-byte aligned and Vp a multiple of a pack, so every row is aligned; then
// both passes read (and pass 2 writes) whole packs, pass 1's last V % kPer logits one by one.
template <class T>
__global__ void __launch_bounds__(kCrossEntropyThreads)
    softmax_cross_entropy_kernel(T* logits, float* __restrict__ losses, const int32_t* __restrict__ targets,
                                 float dloss, int V, int Vp, bool vectorised) {
  XTRAIN_SHARED(math::OnlineSoftmax, warp_acc, [kCrossEntropyThreads / kWarp]);
  XTRAIN_SHARED(math::OnlineSoftmax, row_acc, );
  constexpr int kPer = Pack<T>::kCount;
  const int row = blockIdx.x;
  T* x = logits + static_cast<size_t>(row) * Vp;
  const int target = targets[row];

  math::OnlineSoftmax acc = math::online_softmax_init();
  const int packed = vectorised ? V / kPer * kPer : 0;  // [0, packed) by packs, [packed, V) by elements
  for (int q = threadIdx.x * kPer; q < packed; q += kCrossEntropyThreads * kPer) {
    float v[kPer];
    load_pack(x + q, v);
#pragma unroll
    for (int j = 0; j < kPer; ++j) acc = math::online_softmax_push(acc, v[j]);
  }
  for (int j = packed + threadIdx.x; j < V; j += kCrossEntropyThreads) acc = math::online_softmax_push(acc, load_f32(x[j]));
  acc = warp_merge(acc);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) warp_acc[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    math::OnlineSoftmax total = warp_acc[0];
    for (int w = 1; w < kCrossEntropyThreads / kWarp; ++w) total = math::online_softmax_merge(total, warp_acc[w]);
    row_acc = total;
    losses[row] += logf(total.sum) + total.max - load_f32(x[target]);  // read before pass 2 overwrites it
  }
  __syncthreads();
  const float mx = row_acc.max;
  const float inv = 1.0f / row_acc.sum;
  auto grad = [&](int j, float logit) {  // 0 in the padding
    if (j >= V) return 0.0f;
    const float g = dloss * expf(logit - mx) * inv;
    return j == target ? g - dloss : g;
  };
  const int packed_all = vectorised ? Vp : 0;
  for (int q = threadIdx.x * kPer; q < packed_all; q += kCrossEntropyThreads * kPer) {
    float v[kPer];
    load_pack(x + q, v);
#pragma unroll
    for (int j = 0; j < kPer; ++j) v[j] = grad(q + j, v[j]);
    store_pack(x + q, v);
  }
  for (int j = packed_all + threadIdx.x; j < Vp; j += kCrossEntropyThreads) x[j] = store_as<T>(grad(j, load_f32(x[j])));
}

template <class T>
void softmax_cross_entropy(cudaStream_t stream, T* logits, float* losses, const int32_t* targets, float dloss, int N,
                           int V, int Vp) {
  if (N <= 0) return;
  const bool vectorised = aligned16(logits) && Vp % Pack<T>::kCount == 0;
  launch_kernel(softmax_cross_entropy_kernel<T>, N, kCrossEntropyThreads, 0, stream, logits, losses, targets, dloss, V,
                Vp, vectorised);
}

}  // namespace xtrain::cuda
