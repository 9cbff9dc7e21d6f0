// Causal self-attention with batched cuBLASLt products and fused kernels around them
// (the llm.c fp32 design): q, k, v are gathered per head into contiguous (B,NH,T,hs) blocks so
// each product is one strided batch over B*NH heads; the scores are scaled, masked and
// softmaxed in place by one warp per row; the probabilities (B,NH,T,T) are what forward saves
// for backward.
//
//   forward:  S = Q K^T; P = causal_softmax(S / sqrt(hs)); Y = P V; out = Y as (B,T,C)
//   backward: dY from dout; dP = dY V^T; dV = P^T dY; dS = softmax_backward(P, dP);
//             dQ = dS K; dK = dS^T Q; dqkv = [dQ | dK | dV] as (B,T,3C)
//
// Scratch (attention_scratch_floats): q, k, v, dq, dk, dv, y (7 * B*T*C) and dP (B*NH*T*T).
#pragma once

#include "cuda/check.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels/common.cuh"

namespace xtrain::cuda {

struct AttentionShape {
  int B, T, C, NH;
  int hs() const { return C / NH; }
  size_t btc() const { return static_cast<size_t>(B) * T * C; }
  size_t scores() const { return static_cast<size_t>(B) * NH * T * T; }
};

inline size_t attention_saved_floats(const AttentionShape& s) { return s.scores(); }
inline size_t attention_scratch_floats(const AttentionShape& s) { return 7 * s.btc() + s.scores(); }

// Head layout conversions, one thread per element of one (B,NH,T,hs) block. `parts` is 3 for
// qkv's (B,T,3,NH,hs) rows (q, k, v: a, b, c) and 1 for (B,T,NH,hs) rows (a only).
struct HeadIndex {
  size_t head;  // index into (B,NH,T,hs)
  size_t row;   // index into (B,T,parts,NH,hs) of part 0
};

__device__ inline HeadIndex head_index(size_t idx, int T, int NH, int hs, int parts) {
  const size_t d = idx % hs;
  const size_t t = (idx / hs) % T;
  const size_t h = (idx / (static_cast<size_t>(hs) * T)) % NH;
  const size_t b = idx / (static_cast<size_t>(hs) * T * NH);
  const size_t C = static_cast<size_t>(NH) * hs;
  return {idx, (b * T + t) * parts * C + h * hs + d};
}

// (B,T,parts,NH,hs) -> parts blocks of (B,NH,T,hs)
__global__ void split_heads_kernel(float* __restrict__ a, float* __restrict__ b, float* __restrict__ c,
                                   const float* __restrict__ rows, int B, int T, int NH, int hs, int parts) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T * hs) return;
  const HeadIndex i = head_index(idx, T, NH, hs, parts);
  const size_t C = static_cast<size_t>(NH) * hs;
  a[i.head] = rows[i.row];
  if (parts == 3) {
    b[i.head] = rows[i.row + C];
    c[i.head] = rows[i.row + 2 * C];
  }
}

// parts blocks of (B,NH,T,hs) -> (B,T,parts,NH,hs)
__global__ void merge_heads_kernel(float* __restrict__ rows, const float* __restrict__ a, const float* __restrict__ b,
                                   const float* __restrict__ c, int B, int T, int NH, int hs, int parts) {
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(B) * NH * T * hs) return;
  const HeadIndex i = head_index(idx, T, NH, hs, parts);
  const size_t C = static_cast<size_t>(NH) * hs;
  rows[i.row] = a[i.head];
  if (parts == 3) {
    rows[i.row + C] = b[i.head];
    rows[i.row + 2 * C] = c[i.head];
  }
}

// Row r = (b, h, t) of the scores, in place: p_j = softmax_j(scale * s_j) for j <= t, 0 after.
// The same arithmetic as math::causal_softmax_row, with the max and sum as warp reductions.
__global__ void causal_softmax_kernel(float* scores, int rows, int T, float scale) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int t = row % T;
  float* s = scores + static_cast<size_t>(row) * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += kWarp) mx = fmaxf(mx, scale * s[j]);
  mx = warp_max(mx);
  float sum = 0.0f;
  for (int j = lane; j <= t; j += kWarp) {
    const float e = expf(scale * s[j] - mx);
    s[j] = e;
    sum += e;
  }
  const float inv = 1.0f / warp_sum(sum);
  for (int j = lane; j < T; j += kWarp) s[j] = j <= t ? s[j] * inv : 0.0f;
}

// Row r of dP, in place: dS_j = scale * p_j * (dp_j - sum_k p_k dp_k) for j <= t, 0 after
// (math::causal_softmax_backward_row).
__global__ void causal_softmax_backward_kernel(float* dp, const float* __restrict__ p, int rows, int T, float scale) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
  if (row >= rows) return;
  const int t = row % T;
  float* d = dp + static_cast<size_t>(row) * T;
  const float* pr = p + static_cast<size_t>(row) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += kWarp) dot += pr[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += kWarp) d[j] = j <= t ? scale * pr[j] * (d[j] - dot) : 0.0f;
}

namespace detail {
constexpr unsigned kAttnThreads = 256;
constexpr unsigned kRowsPerBlock = kAttnThreads / kWarp;

struct HeadBuffers {
  float *q, *k, *v, *dq, *dk, *dv, *y, *dp;
  HeadBuffers(float* scratch, const AttentionShape& s) {
    const size_t n = s.btc();
    q = scratch;
    k = q + n;
    v = k + n;
    dq = v + n;
    dk = dq + n;
    dv = dk + n;
    y = dv + n;
    dp = y + n;
  }
};

inline void split_heads(cudaStream_t stream, float* a, float* b, float* c, const float* rows, int parts,
                        const AttentionShape& s) {
  split_heads_kernel<<<blocks_for(s.btc(), kAttnThreads), kAttnThreads, 0, stream>>>(a, b, c, rows, s.B, s.T, s.NH,
                                                                                     s.hs(), parts);
  XTRAIN_LAUNCH_CHECK();
}

inline void merge_heads(cudaStream_t stream, float* rows, const float* a, const float* b, const float* c, int parts,
                        const AttentionShape& s) {
  merge_heads_kernel<<<blocks_for(s.btc(), kAttnThreads), kAttnThreads, 0, stream>>>(rows, a, b, c, s.B, s.T, s.NH,
                                                                                     s.hs(), parts);
  XTRAIN_LAUNCH_CHECK();
}
}  // namespace detail

inline void attention_forward(cudaStream_t stream, GemmEngine& gemm, float* out, float* probs, const float* qkv,
                              float* scratch, const AttentionShape& s) {
  const detail::HeadBuffers h(scratch, s);
  const int T = s.T, hs = s.hs(), heads = s.B * s.NH;
  const long long qstride = static_cast<long long>(T) * hs, sstride = static_cast<long long>(T) * T;
  detail::split_heads(stream, h.q, h.k, h.v, qkv, 3, s);
  // S (T,T) = Q (T,hs) K^T
  gemm.run(T, T, hs, 1.0f, {h.q, hs, false, qstride}, {h.k, hs, true, qstride}, 0.0f, probs, T, sstride, heads);
  const int rows = heads * T;
  causal_softmax_kernel<<<blocks_for(rows, detail::kRowsPerBlock), detail::kAttnThreads, 0, stream>>>(
      probs, rows, T, 1.0f / sqrtf(static_cast<float>(hs)));
  XTRAIN_LAUNCH_CHECK();
  // Y (T,hs) = P (T,T) V (T,hs)
  gemm.run(T, hs, T, 1.0f, {probs, T, false, sstride}, {h.v, hs, false, qstride}, 0.0f, h.y, hs, qstride, heads);
  detail::merge_heads(stream, out, h.y, nullptr, nullptr, 1, s);
}

inline void attention_backward(cudaStream_t stream, GemmEngine& gemm, float* dqkv, const float* dout,
                               const float* qkv, const float* probs, float* scratch, const AttentionShape& s) {
  const detail::HeadBuffers h(scratch, s);
  const int T = s.T, hs = s.hs(), heads = s.B * s.NH;
  const long long qstride = static_cast<long long>(T) * hs, sstride = static_cast<long long>(T) * T;
  detail::split_heads(stream, h.q, h.k, h.v, qkv, 3, s);
  float* dy = h.y;  // (B,NH,T,hs) gathered from dout (B,T,C)
  detail::split_heads(stream, dy, nullptr, nullptr, dout, 1, s);
  // dP (T,T) = dY (T,hs) V^T
  gemm.run(T, T, hs, 1.0f, {dy, hs, false, qstride}, {h.v, hs, true, qstride}, 0.0f, h.dp, T, sstride, heads);
  // dV (T,hs) = P^T (T,T) dY (T,hs)
  gemm.run(T, hs, T, 1.0f, {probs, T, true, sstride}, {dy, hs, false, qstride}, 0.0f, h.dv, hs, qstride, heads);
  const int rows = heads * T;
  causal_softmax_backward_kernel<<<blocks_for(rows, detail::kRowsPerBlock), detail::kAttnThreads, 0, stream>>>(
      h.dp, probs, rows, T, 1.0f / sqrtf(static_cast<float>(hs)));
  XTRAIN_LAUNCH_CHECK();
  // dQ (T,hs) = dS (T,T) K (T,hs);  dK (T,hs) = dS^T (T,T) Q (T,hs)
  gemm.run(T, hs, T, 1.0f, {h.dp, T, false, sstride}, {h.k, hs, false, qstride}, 0.0f, h.dq, hs, qstride, heads);
  gemm.run(T, hs, T, 1.0f, {h.dp, T, true, sstride}, {h.q, hs, false, qstride}, 0.0f, h.dk, hs, qstride, heads);
  detail::merge_heads(stream, dqkv, h.dq, h.dk, h.dv, 3, s);
}

}  // namespace xtrain::cuda
