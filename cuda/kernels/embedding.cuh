// Token + position embedding, forward and a deterministic backward.
//
// Backward must add each position's gradient into the row of its token; several positions
// share a token, so a plain scatter would need float atomics (bits depend on scheduling).
// Instead each token row is owned by one warp that adds its positions in ascending order:
//   1. key[i] = token[i] << position_bits | i (unique keys, so any sort orders them the same);
//   2. cub::DeviceRadixSort sorts the keys (stable, deterministic);
//   3. one warp per sorted index; the warp at the first index of a token's run walks the run
//      in position order and adds into dwte[token], lanes striding the channels.
// The additions happen in the CPU backend's order (position by position onto the existing
// gradient), so only the rounding of single adds differs between the backends: none.
// dwpe is a plain per-(t, c) sum over b, also in the CPU's order.
#pragma once

#include <cub/device/device_radix_sort.cuh>

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"

namespace xtrain::cuda {

__global__ void embedding_forward_kernel(float* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const float* __restrict__ wte, const float* __restrict__ wpe, int BT, int T,
                                         int C) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(BT) * C) return;
  const int c = static_cast<int>(idx % C);
  const int bt = static_cast<int>(idx / C);
  const int t = bt % T;
  out[idx] = wte[static_cast<size_t>(tokens[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
}

// dwpe[t, c] += dout[0, t, c], then dout[1, t, c], ...
__global__ void position_grad_kernel(float* __restrict__ dwpe, const float* __restrict__ dout, int B, int T, int C) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(T) * C) return;
  float acc = dwpe[idx];
  for (int b = 0; b < B; ++b) acc += dout[static_cast<size_t>(b) * T * C + idx];
  dwpe[idx] = acc;
}

__global__ void token_keys_kernel(unsigned long long* __restrict__ keys, const int32_t* __restrict__ tokens, int BT,
                                  int position_bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= BT) return;
  keys[i] = (static_cast<unsigned long long>(tokens[i]) << position_bits) | static_cast<unsigned long long>(i);
}

constexpr int kTokenGradWarps = 8;

__global__ void token_grad_kernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                  const unsigned long long* __restrict__ sorted, int BT, int C, int position_bits) {
  const int i = blockIdx.x * kTokenGradWarps + threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (i >= BT) return;
  const unsigned long long token = sorted[i] >> position_bits;
  if (i > 0 && (sorted[i - 1] >> position_bits) == token) return;  // not the first of its run
  const unsigned long long position_mask = (1ull << position_bits) - 1;
  float* row = dwte + token * C;
  for (int c = lane; c < C; c += kWarp) {
    float acc = row[c];
    for (int j = i; j < BT && (sorted[j] >> position_bits) == token; ++j) {
      acc += dout[(sorted[j] & position_mask) * C + c];
    }
    row[c] = acc;
  }
}

inline int bits_for(unsigned long long values) {  // bits to hold 0 .. values-1
  int bits = 0;
  while ((1ull << bits) < values) ++bits;
  return bits;
}

inline void embedding_forward(cudaStream_t stream, float* out, const int32_t* tokens, const float* wte,
                              const float* wpe, int B, int T, int C) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  embedding_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe, B * T, T, C);
  XTRAIN_LAUNCH_CHECK();
}

// Tokens are non-negative int32: 31 bits. (The interface does not pass the vocabulary size;
// the radix sort then makes a pass or two more than strictly needed, microseconds.)
constexpr int kTokenBits = 31;

// Scratch layout: keys (BT), sorted keys (BT), then CUB's temporary storage, each 256-aligned.
inline size_t key_array_bytes(int BT) {
  return (static_cast<size_t>(BT) * sizeof(unsigned long long) + 255) / 256 * 256;
}

inline size_t sort_temp_bytes(int BT, int end_bit, cudaStream_t stream) {
  size_t bytes = 0;
  XTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<unsigned long long*>(nullptr),
                                                   static_cast<unsigned long long*>(nullptr), BT, 0, end_bit, stream));
  return bytes;
}

// Scratch bytes for embedding_backward with B*T positions.
inline size_t embedding_backward_scratch_bytes(int BT) {
  const int end_bit = bits_for(static_cast<unsigned long long>(BT)) + kTokenBits;
  return 2 * key_array_bytes(BT) + sort_temp_bytes(BT, end_bit, nullptr);
}

// `scratch` holds embedding_backward_scratch_bytes(B*T) bytes, 256-byte aligned.
inline void embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const float* dout,
                               const int32_t* tokens, int B, int T, int C, void* scratch) {
  const int BT = B * T;
  if (BT == 0) return;
  constexpr unsigned kThreads = 256;
  position_grad_kernel<<<blocks_for(static_cast<size_t>(T) * C, kThreads), kThreads, 0, stream>>>(dwpe, dout, B, T,
                                                                                                  C);
  XTRAIN_LAUNCH_CHECK();

  const int position_bits = bits_for(static_cast<unsigned long long>(BT));
  const int end_bit = position_bits + kTokenBits;
  auto* keys = static_cast<unsigned long long*>(scratch);
  auto* sorted = reinterpret_cast<unsigned long long*>(static_cast<char*>(scratch) + key_array_bytes(BT));
  void* sort_temp = static_cast<char*>(scratch) + 2 * key_array_bytes(BT);
  size_t sort_bytes = sort_temp_bytes(BT, end_bit, stream);
  token_keys_kernel<<<blocks_for(BT, kThreads), kThreads, 0, stream>>>(keys, tokens, BT, position_bits);
  XTRAIN_LAUNCH_CHECK();
  XTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(sort_temp, sort_bytes, keys, sorted, BT, 0, end_bit, stream));
  token_grad_kernel<<<blocks_for(BT, kTokenGradWarps), kTokenGradWarps * kWarp, 0, stream>>>(dwte, dout, sorted, BT,
                                                                                            C, position_bits);
  XTRAIN_LAUNCH_CHECK();
}

}  // namespace xtrain::cuda
