// Causal self-attention without the (T,T) matrices, FlashAttention-2 style, and the launchers.
// The arithmetic and its bf16 rounding points are worker/math/flash_attention.hpp's, shared with
// the CPU version (worker/cpu/flash_attention.*), which every [gpu] test compares against:
//
//   forward, per 64-key block:  m' = max(m, max_j x_ij);  p_ij = exp(x_ij - m')
//                               l = l exp(m - m') + sum_j p_ij;  acc = acc exp(m - m') + [bf16] p V
//                               O = [bf16] (acc / l);  lse = m + log(l)   (fp32, saved for backward)
//   backward:                   D_i = dO_i . O_i;  p_ij = exp(x_ij - lse_i);  ds_ij = p_ij (dO_i . v_j - D_i)
//                               dV = [bf16] [bf16]p^T dO;  dQ = [bf16] scale [bf16]ds K;  dK = [bf16] scale [bf16]ds^T Q
//
// Every kernel runs 128 threads (4 warps) per block (the bf16 ones 256, 8 warps, at head sizes 64
// and 128), one block per (tile, head), the heaviest tiles first (causal rows near the end see the
// most keys). No atomics: backward runs one kernel for dK and dV (a block owns 16 keys per warp
// and walks the queries that see them) and one for dQ (a block owns 16 queries per warp and walks
// their keys), recomputing p in both; every sum has a fixed order, the same at 4 and 8 warps (a
// row's blocks are walked in the same order; a warp skips only blocks its rows see none of), so
// results are deterministic. Tiles beyond T are zero-filled in shared memory and masked.
//
//
// This file: what the two storages share (the head's rows in global memory, tile loads, the
// backward's D = dO . O, the launch helpers, the head-size dispatch). The kernels and their
// launchers: flash_attention_bf16.cuh (tensor cores), flash_attention_fp32.cuh (CUDA cores).
//
// Limits: head size 16, 32, 64 or 128 (hs = C / NH; check_flash_attention_shape says so by name),
// any T >= 1, qkv/out/dout/dqkv 16-byte aligned with C a multiple of 8.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/flash_attention.hpp"

namespace xtrain::cuda {

using bf16 = __nv_bfloat16;

inline bool flash_attention_head_size_supported(int hs) { return hs == 16 || hs == 32 || hs == 64 || hs == 128; }


namespace flash {

constexpr int kWarps = 4;  // every kernel's but the bf16 ones' at head sizes 64 and 128
constexpr int kThreads = kWarps * kWarp;

// The bf16 kernels' warps (each owns 16 rows of the block's resident tile): 8 (128-row tiles)
// where a head's products are large enough that sharing each streamed tile between twice the rows
// pays (half the tile copies from L2 and barriers per row), 4 (64-row tiles) for the small heads.
constexpr int bf16_warps(int hs) { return hs >= 64 ? 8 : 4; }

// ---- one head's rows --------------------------------------------------------------------------

// Causal blocks are uneven: query tile qt of n sees qt + 1 key tiles. Block index -> (tile, head)
// so that the first blocks scheduled get the most work.
__device__ inline int heads_of(const AttentionShape& s) { return s.B * s.NH; }
__device__ inline int last_tile_first(const AttentionShape& s, int tile_rows) {
  const int tiles = (s.T + tile_rows - 1) / tile_rows;
  return (tiles - 1 - static_cast<int>(blockIdx.x) / heads_of(s)) * tile_rows;
}
__device__ inline int first_tile_first(const AttentionShape& s, int tile_rows) {
  return static_cast<int>(blockIdx.x) / heads_of(s) * tile_rows;
}

// Issues the copy of rows x HS elements of S from global rows (stride ld) into shared rows of
// stride HS + PAD as 16-byte cp.async chunks; rows at or beyond `valid` (>= 1) are zero-filled
// (tails past T; their source is row 0, never read). The tile is there once this thread's
// cp_async_wait covers the group and then a __syncthreads.
template <class S, int HS, int PAD, int ROWS, int THREADS>
__device__ inline void load_tile(S* dst, const S* src, size_t ld, int valid) {
  constexpr int kPerChunk = 16 / sizeof(S);
  constexpr int kChunks = HS / kPerChunk;
  for (int c = threadIdx.x; c < ROWS * kChunks; c += THREADS) {
    const int r = c / kChunks, k = c % kChunks;
    cp_async_16(dst + r * (HS + PAD) + k * kPerChunk, src + (r < valid ? r * ld : 0) + k * kPerChunk,
                r < valid ? 16 : 0);
  }
}

// Every tile this thread issued, then every thread's: the single-buffered kernels' (fp32) wait.
__device__ inline void tiles_arrived() {
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
}

// The head this block works on (block index % heads): where its rows start in qkv / dqkv (q at
// `qkv`, k and v C further on, rows of stride ld = 3C), in out / dout (stride C), in lse / D.
template <class S>
struct HeadRows {
  const S* q;  // row 0 of the head's q in qkv
  size_t qkv, out, stat, ld;
  int C, T;

  __device__ HeadRows(const S* qkv_base, const AttentionShape& s) : ld(3 * static_cast<size_t>(s.C)), C(s.C), T(s.T) {
    const int head = static_cast<int>(blockIdx.x) % heads_of(s), b = head / s.NH, h = head % s.NH;
    const size_t hs = static_cast<size_t>(s.hs());
    qkv = static_cast<size_t>(b) * s.T * ld + h * hs;
    out = static_cast<size_t>(b) * s.T * s.C + h * hs;
    stat = static_cast<size_t>(head) * s.T;
    q = qkv_base + qkv;
  }
  // part 0, 1, 2 (q, k, v) of rows r0 .. r0 + ROWS - 1 (r0 < T) into a shared tile, issued by
  // the block's THREADS threads (load_tile); zero past T.
  template <int HS, int PAD, int ROWS, int THREADS = kThreads>
  __device__ void load(S* tile, int part, int r0) const {
    load_tile<S, HS, PAD, ROWS, THREADS>(tile, q + part * C + r0 * ld, ld, min(ROWS, T - r0));
  }
  // Rows r0 .. r0 + ROWS - 1 (r0 < T) of dout into a shared tile, issued (load_tile); zero past T.
  template <int HS, int PAD, int ROWS, int THREADS = kThreads>
  __device__ void load_dout(S* tile, const S* dout, int r0) const {
    load_tile<S, HS, PAD, ROWS, THREADS>(tile, dout + out + r0 * static_cast<size_t>(C), C, min(ROWS, T - r0));
  }
  // lse and D of queries q0 .. q0 + n - 1 into shared memory, written by the block's THREADS
  // threads; 0 past T, where every kernel masks the query anyway.
  template <int THREADS = kThreads>
  __device__ void load_query_stats(float* s_lse, float* s_D, const float* lse, const float* D, int q0, int n) const {
    for (int i = threadIdx.x; i < n; i += THREADS) {
      s_lse[i] = q0 + i < T ? lse[stat + q0 + i] : 0.0f;
      s_D[i] = q0 + i < T ? D[stat + q0 + i] : 0.0f;
    }
  }
};

// Reductions over the 4 lanes of a quad (lanes 4g .. 4g+3), which hold one row: a bf16 score
// row's columns, an fp32 row's quarters of the head dimension.
__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
// (a + b) + (c + d) in every lane of the quad: the same bits in all four (addition commutes).
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// The backward kernels' arguments, one struct for all four.
template <class S>
struct BackwardArgs {
  S* dqkv;            // (B,T,3C) writes: dq (the dQ kernels) or dk and dv (the dK/dV kernels)
  const S* dout;      // (B,T,C)
  const S* qkv;       // (B,T,3C)
  const float* lse;   // (B,NH,T) from forward
  const float* D;     // (B,NH,T) dO . O
  AttentionShape s;
  float scale;
};

// D = dO . O per row, one warp per row (B*NH*T rows, the lse layout).
template <class S>
__global__ void __launch_bounds__(kThreads)
    backward_dot_kernel(float* __restrict__ D, const S* __restrict__ dout, const S* __restrict__ out, AttentionShape s) {
  const size_t row = static_cast<size_t>(blockIdx.x) * kWarps + threadIdx.x / kWarp;
  if (row >= static_cast<size_t>(s.B) * s.NH * s.T) return;  // whole warps return
  const int lane = threadIdx.x % kWarp, hs = s.hs();
  const int head = static_cast<int>(row / s.T), t = static_cast<int>(row % s.T);
  const size_t base = (static_cast<size_t>(head / s.NH) * s.T + t) * s.C + static_cast<size_t>(head % s.NH) * hs;
  float d = 0.0f;
  for (int i = lane; i < hs; i += kWarp) d += static_cast<float>(dout[base + i]) * static_cast<float>(out[base + i]);
  d = warp_sum(d);
  if (lane == 0) D[row] = d;
}

// ---- launchers --------------------------------------------------------------------------------

// Dynamic shared memory past 48 KiB needs the kernel's consent (sm_80: up to 163 KiB).
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), unsigned blocks, unsigned threads, size_t smem_bytes, cudaStream_t stream,
            Args... args) {
  if (smem_bytes > 48 * 1024) {
    XTRAIN_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  }
  launch_kernel(kernel, blocks, threads, smem_bytes, stream, args...);
}

inline unsigned tiles(const AttentionShape& s, int rows) {
  return static_cast<unsigned>((s.T + rows - 1) / rows) * static_cast<unsigned>(s.B * s.NH);
}

inline float softmax_scale(const AttentionShape& s) {
  return 1.0f / sqrtf(static_cast<float>(s.hs()));  // the CPU's value, bit for bit
}

// f(std::integral_constant<int, hs>) for the shape's head size (flash_attention_head_size_supported).
template <class F>
void with_head_size(const AttentionShape& s, F&& f) {
  switch (s.hs()) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default: break;
  }
  throw std::invalid_argument("flash attention: unsupported head size " + std::to_string(s.hs()));
}

}  // namespace flash

}  // namespace xtrain::cuda
