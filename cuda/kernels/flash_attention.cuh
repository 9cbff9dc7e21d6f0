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
// bf16 storage (tensor cores: mma.sync.m16n8k16, bf16 in, fp32 accumulate; sm_80 and later):
//   each warp owns 16 rows of the block's "A side" (queries in forward and dQ, keys in dK/dV) and
//   computes its 16 x n products as 8-column mma tiles. The softmax runs on the accumulator
//   fragments in registers: a thread holds rows g and g + 8 (g = lane / 4) of each tile, columns
//   2(lane % 4) and +1, so a row's max and sum are a reduction over the 4 lanes of a quad. The
//   accumulator layout of two adjacent 8-column tiles is the A-operand layout of one k = 16 step,
//   so p and ds go from the scores' registers into the next product, rounded to bf16 on the way.
//   Shared memory: row-major tiles of bf16 rows padded by 8 elements (16 bytes), which keeps every
//   row 16-byte aligned and puts the 8 rows an ldmatrix phase reads in different banks. Fragments
//   come from there by ldmatrix.x4 (.trans for a B operand stored k-major: V, dO, Q, K in the
//   products with p, ds); tiles come from global memory by 16-byte cp.async, the streamed ones
//   double-buffered (the next block's copy is issued right after the barrier that frees its
//   buffer, and waited for at the top of the next iteration: one __syncthreads per block).
//   forward: 128 queries per block with 8 warps at head sizes 64 and 128, else 64 with 4 (Q
//            fragments in registers), 64-key blocks (K, V streamed)
//   dK, dV:  128 keys per block with 8 warps at head sizes 64 and 128, else 64 with 4 (K, V
//            resident), 32-query blocks (Q, dO, lse, D streamed)
//   dQ:      128 queries per block with 8 warps at head sizes 64 and 128, else 64 with 4 (Q, dO
//            resident), 32-key blocks (K, V streamed)
// fp32 storage (CUDA cores, strict fp32 for the fp32 and tf32 precisions):
//   four lanes per row (a quad), each holding a quarter of the head dimension as float4 chunks
//   (chunk tq + 4i for lane tq, so a quad reads 64 contiguous bytes of a shared row); a dot product
//   is the quad's partial sums reduced by two xor shuffles. 32 rows per block, 32-key or 32-query
//   blocks in shared memory, fp32 rows unpadded (a quad's chunks are contiguous, all quads read the
//   same row: a broadcast), loaded by cp.async and waited for at once (no double buffering).
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

// ---- bf16: mma.sync fragments ----------------------------------------------------------------
// m16n8k16, A 16x16 row-major, B 16x8 column-major, C/D 16x8 fp32. With g = lane / 4, t = lane % 4:
//   A: a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B: b[0] = (k 2t..2t+1, n g), b[1] = (k 2t+8..2t+9, n g)
//   C: c[0], c[1] = (g, 2t), (g, 2t+1); c[2], c[3] = (g+8, 2t), (g+8, 2t+1)
// Two bf16 in a 32-bit register: the lower column (or k) in the low half.

struct FragA {
  uint32_t x[4];
};
struct FragB {
  uint32_t x[2];
};

__device__ inline void mma_bf16(float (&d)[4], const FragA& a, const FragB& b) { mma_m16n8k16_bf16(d, a.x, b.x); }

// Round to nearest even: the [bf16] points.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Fragments come from shared memory by ldmatrix.x4 (portable.cuh): lane L names row L % 8 of
// 8x8 matrix L / 8, and register m gets the lane's fragment of matrix m, which for a row-major
// 8x8 block is exactly an mma register's layout (rows g, columns 2t and 2t + 1), and with .trans
// that of the block's transpose. Each fragment below picks the four blocks in register order.

// A = tile[row0 .. row0+15][col0 .. col0+15]: blocks (rows 0-7 | 8-15) x (cols 0-7), then cols 8-15.
__device__ inline FragA load_a(const bf16* tile, int stride, int row0, int col0) {
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  FragA f;
  ldmatrix_x4(f.x, tile + (row0 + lane % 8 + 8 * (m & 1)) * stride + col0 + 8 * (m >> 1));
  return f;
}
// b[i](k, n) = tile[n0 + 8i + n][k0 + k], i = 0, 1: two adjacent 8-column B tiles of a product with
// a row-major tile transposed (Q K^T, dO V^T, K Q^T). Blocks (n 0-7) x (k 0-7 | 8-15), then n 8-15.
__device__ inline void load_b_transposed(FragB (&b)[2], const bf16* tile, int stride, int n0, int k0) {
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  uint32_t r[4];
  ldmatrix_x4(r, tile + (n0 + lane % 8 + 8 * (m >> 1)) * stride + k0 + 8 * (m & 1));
  b[0] = {{r[0], r[1]}};
  b[1] = {{r[2], r[3]}};
}
// b[i](k, n) = tile[k0 + k][n0 + 8i + n]: the same of a product with a row-major tile as it is
// (P V, ds K, p^T dO), by .trans. Blocks (k 0-7 | 8-15) x (n 0-7), then n 8-15.
__device__ inline void load_b(FragB (&b)[2], const bf16* tile, int stride, int k0, int n0) {
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  uint32_t r[4];
  ldmatrix_x4_trans(r, tile + (k0 + lane % 8 + 8 * (m & 1)) * stride + n0 + 8 * (m >> 1));
  b[0] = {{r[0], r[1]}};
  b[1] = {{r[2], r[3]}};
}
// The accumulators of two adjacent 8-column tiles (columns 0-7 and 8-15 of a k = 16 step) as an
// A operand, rounded to bf16.
__device__ inline FragA a_from_accumulators(const float (&lo)[4], const float (&hi)[4]) {
  return {{pack_bf16(lo[0], lo[1]), pack_bf16(lo[2], lo[3]), pack_bf16(hi[0], hi[1]), pack_bf16(hi[2], hi[3])}};
}

__device__ inline float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
// (a + b) + (c + d) in every lane of the quad: the same bits in all four (addition commutes).
__device__ inline float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

template <int HS>
constexpr int kPaddedRow = HS + 8;  // bf16 elements per shared row

// x[j] += a (16 x 16, columns k0 .. k0 + 15 of some A) times rows 8j .. 8j + 7 of `tile` transposed
// (its columns k0 .. k0 + 15), j < N / 8: one k = 16 step of a product with a transposed tile.
template <int N>
__device__ inline void times_transposed_tile(float (&x)[N / 8][4], const FragA& a, const bf16* tile, int stride,
                                             int k0) {
  static_assert(N % 16 == 0, "B fragments come in pairs");
  #pragma unroll
  for (int j = 0; j < N / 8; j += 2) {
    FragB b[2];
    load_b_transposed(b, tile, stride, 8 * j, k0);
    mma_bf16(x[j], a, b[0]);
    mma_bf16(x[j + 1], a, b[1]);
  }
}

// x[j] += A1 B1^T and y[j] += A2 B2^T over HS, j < N/8: this warp's 16 rows of a1 and a2 (shared
// tiles, from row 16 * warp) against N rows of b1 and b2. A tile's scores and dP, or their
// transposes.
template <int HS, int N>
__device__ inline void products_with_transposed(float (&x)[N / 8][4], float (&y)[N / 8][4], const bf16* a1,
                                                const bf16* b1, const bf16* a2, const bf16* b2) {
  constexpr int SP = kPaddedRow<HS>;
  const int row0 = 16 * (threadIdx.x / kWarp);
  #pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    const FragA fa1 = load_a(a1, SP, row0, 16 * kk), fa2 = load_a(a2, SP, row0, 16 * kk);
    times_transposed_tile<N>(x, fa1, b1, SP, 16 * kk);
    times_transposed_tile<N>(y, fa2, b2, SP, 16 * kk);
  }
}

// acc (16 x HS) += [bf16]x (16 x K) tile (K x HS): p V, p^T dO, ds^T Q and ds K.
template <int HS, int K>
__device__ inline void accumulate_times_tile(float (&acc)[HS / 8][4], const float (&x)[K / 8][4], const bf16* tile) {
  #pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    const FragA a = a_from_accumulators(x[2 * kk], x[2 * kk + 1]);
    #pragma unroll
    for (int n = 0; n < HS / 8; n += 2) {
      FragB b[2];
      load_b(b, tile, kPaddedRow<HS>, 16 * kk, 8 * n);
      mma_bf16(acc[n], a, b[0]);
      mma_bf16(acc[n + 1], a, b[1]);
    }
  }
}

// O and lse of 16 * WARPS queries (16 per warp) against 64-key blocks. Launch bounds: 8 warps
// leave ptxas all 255 registers (one block per SM; sm_90: 167 at head size 64, 240 at 128, no
// spills, where a cap of 128 for two blocks spilled), 4 warps at least 4 blocks (128 registers).
template <int HS, int WARPS>
__global__ void __launch_bounds__(WARPS * kWarp, WARPS == 8 ? 1 : 4)
    forward_bf16_kernel(bf16* __restrict__ out, float* __restrict__ lse, const bf16* __restrict__ qkv,
                        AttentionShape s, float scale) {
  constexpr int kQueries = 16 * WARPS, kKeys = math::kFlashKeyBlock, SP = kPaddedRow<HS>, kT = WARPS * kWarp;
  static_assert(kKeys % 16 == 0, "one 16-row mma tile per warp, keys in 16-column steps");
  static_assert(kQueries <= 2 * kKeys, "the query tile fits the second buffer (a K and a V tile)");
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  // Two buffers of (K, V) tiles: the next block's copy runs while this one's products do. Buffer b
  // at sK + b * kBuffer (pointers computed, not indexed from an array, which would live in local
  // memory); buffer 1 first holds the queries (K and V's places together: up to 2 kKeys rows).
  constexpr int kBuffer = 2 * kKeys * SP;
  bf16* const sK = reinterpret_cast<bf16*>(smem);  // (2, kKeys, SP) at a stride of kBuffer
  bf16* const sV = sK + kKeys * SP;                // (2, kKeys, SP) at a stride of kBuffer
  const int T = s.T;
  const HeadRows<bf16> hd(qkv, s);
  const int q0 = last_tile_first(s, kQueries);
  const int warp = threadIdx.x / kWarp, g = threadIdx.x % kWarp / 4, t = threadIdx.x % 4;
  const int row0 = q0 + 16 * warp + g;  // this thread's rows: row0 and row0 + 8

  hd.template load<HS, 8, kQueries, kT>(sK + kBuffer, 0, q0);
  hd.template load<HS, 8, kKeys, kT>(sK, 1, 0);
  hd.template load<HS, 8, kKeys, kT>(sV, 2, 0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  FragA qf[HS / 16];
  #pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) qf[kk] = load_a(sK + kBuffer, SP, 16 * warp, 16 * kk);

  float acc[HS / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int last_key = min(T, q0 + kQueries) - 1;
  for (int c0 = 0, buf = 0; c0 <= last_key; c0 += kKeys, buf ^= 1) {
    cp_async_wait<0>();  // this thread's part of block c0
    __syncthreads();     // everyone's; and everyone is done with the other buffer (or the queries)
    if (c0 + kKeys <= last_key) {
      hd.template load<HS, 8, kKeys, kT>(sK + (buf ^ 1) * kBuffer, 1, c0 + kKeys);
      hd.template load<HS, 8, kKeys, kT>(sV + (buf ^ 1) * kBuffer, 2, c0 + kKeys);
    }
    cp_async_commit();
    const bf16* const k_tile = sK + buf * kBuffer;
    float x[kKeys / 8][4] = {};  // scores, then p
    #pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) times_transposed_tile<kKeys>(x, qf[kk], k_tile, SP, 16 * kk);
    // A row may see none of this block's keys (a 128-query tile's first 64 rows, the last block):
    // its max is then -inf, m stays (finite: every row sees key 0), alpha = 1, p = 0, and the
    // block adds exact zeros to l and acc, the CPU's bits as if it were skipped.
    float mx[2] = {-INFINITY, -INFINITY};
    #pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = c0 + 8 * j + 2 * t + (e & 1), row = row0 + 8 * (e >> 1);
        x[j][e] = key <= row ? x[j][e] * scale : -INFINITY;
        mx[e >> 1] = fmaxf(mx[e >> 1], x[j][e]);
      }
    }
    float alpha[2], sum[2] = {0.0f, 0.0f};
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float m_new = fmaxf(m[r], quad_max(mx[r]));
      alpha[r] = expf(m[r] - m_new);  // 0 on the first block (m = -inf)
      m[r] = m_new;
    }
    #pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        x[j][e] = expf(x[j][e] - m[e >> 1]);
        sum[e >> 1] += x[j][e];
      }
    }
    #pragma unroll
    for (int r = 0; r < 2; ++r) l[r] = l[r] * alpha[r] + quad_sum(sum[r]);
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      #pragma unroll
      for (int e = 0; e < 4; ++e) acc[n][e] *= alpha[e >> 1];
    accumulate_times_tile<HS, kKeys>(acc, x, sV + buf * kBuffer);
  }
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    const float inv = 1.0f / l[r];
    bf16* o = out + hd.out + static_cast<size_t>(row) * s.C + 2 * t;
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      *reinterpret_cast<uint32_t*>(o + 8 * n) = pack_bf16(acc[n][2 * r] * inv, acc[n][2 * r + 1] * inv);
    if (t == 0) lse[hd.stat + row] = m[r] + logf(l[r]);
  }
}

// The backward kernels' streamed tiles: 32 rows (queries for dK/dV, keys for dQ).
constexpr int kBackwardBlock = 32;

// Blocks per SM the bf16 backward kernels ask ptxas for (sm_90, -Xptxas -v, no spills anywhere):
// 2 at head size 64 with 8 warps (128 registers: 16 warps per SM; left free it took 135, one
// block); 0, no minimum, elsewhere: at 128 one 8-warp block uses up to 240 registers (a cap of
// 128 for two blocks spills in dQ), and an explicit 1 at 4 warps made ptxas take more registers
// (dQ at head size 32: 113 instead of 96, five blocks per SM down to four).
constexpr int backward_bf16_min_blocks(int hs, int warps) { return warps == 8 && hs == 64 ? 2 : 0; }

// dK and dV of 16 * WARPS keys (16 per warp): S^T = K Q^T and dP^T = V dO^T per 32-query block,
// then dV += [bf16]p^T dO and dK += [bf16]ds^T Q. A warp whose keys no query of the block sees
// (the first blocks of a 128-key tile) skips the block's products: they would add exact zeros.
// Launch bounds: backward_bf16_min_blocks.
template <int HS, int WARPS>
__global__ void __launch_bounds__(WARPS * kWarp, backward_bf16_min_blocks(HS, WARPS))
    backward_dkdv_bf16_kernel(BackwardArgs<bf16> args) {
  const auto [dqkv, dout, qkv, lse, D, s, scale] = args;
  constexpr int kKeys = 16 * WARPS, kQueries = kBackwardBlock, SP = kPaddedRow<HS>, kT = WARPS * kWarp;
  static_assert(kQueries % 16 == 0, "queries in 16-column steps");
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  // K and V stay; (Q, dO, lse, D) of a query block are double-buffered: the next block's copy runs
  // while this one's products do. Buffer b at b * kBuffer (bf16) or b * kStats (floats) from the
  // first (computed pointers: an array of them would live in local memory).
  constexpr int kBuffer = 2 * kQueries * SP, kStats = 2 * kQueries;
  bf16* const sK = reinterpret_cast<bf16*>(smem);          // (kKeys, SP)
  bf16* const sV = sK + kKeys * SP;                        // (kKeys, SP)
  bf16* const sQ = sV + kKeys * SP;                        // (2, kQueries, SP) at a stride of kBuffer
  bf16* const sdO = sQ + kQueries * SP;                    // (2, kQueries, SP) at a stride of kBuffer
  float* const sLse = reinterpret_cast<float*>(sQ + 2 * kBuffer);  // (2, kQueries) at a stride of kStats
  float* const sD = sLse + kQueries;                                // (2, kQueries) at a stride of kStats
  const int T = s.T;
  const HeadRows<bf16> hd(qkv, s);
  const int c0 = first_tile_first(s, kKeys);
  const int warp = threadIdx.x / kWarp, g = threadIdx.x % kWarp / 4, t = threadIdx.x % 4;
  const int key0 = c0 + 16 * warp + g;  // this thread's keys: key0 and key0 + 8

  hd.template load<HS, 8, kKeys, kT>(sK, 1, c0);
  hd.template load<HS, 8, kKeys, kT>(sV, 2, c0);
  hd.template load<HS, 8, kQueries, kT>(sQ, 0, c0);
  hd.template load_dout<HS, 8, kQueries, kT>(sdO, dout, c0);
  cp_async_commit();
  hd.template load_query_stats<kT>(sLse, sD, lse, D, c0, kQueries);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  for (int q0 = c0, buf = 0; q0 < T; q0 += kQueries, buf ^= 1) {  // queries before c0 see none of these keys
    cp_async_wait<0>();  // this thread's part of block q0
    __syncthreads();     // everyone's; and everyone is done with the other buffer
    const int next = buf ^ 1;
    if (q0 + kQueries < T) {
      hd.template load<HS, 8, kQueries, kT>(sQ + next * kBuffer, 0, q0 + kQueries);
      hd.template load_dout<HS, 8, kQueries, kT>(sdO + next * kBuffer, dout, q0 + kQueries);
    }
    cp_async_commit();
    if (q0 + kQueries < T) {
      hd.template load_query_stats<kT>(sLse + next * kStats, sD + next * kStats, lse, D, q0 + kQueries, kQueries);
    }
    if (q0 + kQueries <= c0 + 16 * warp) continue;  // the block's last query precedes this warp's first key
    const bf16* const q_tile = sQ + buf * kBuffer;
    const bf16* const do_tile = sdO + buf * kBuffer;
    const float* const q_lse = sLse + buf * kStats;
    const float* const q_D = sD + buf * kStats;
    float st[kQueries / 8][4] = {}, dpt[kQueries / 8][4] = {};  // S^T and dP^T, then p^T and ds^T
    products_with_transposed<HS, kQueries>(st, dpt, sK, q_tile, sV, do_tile);
    #pragma unroll
    for (int j = 0; j < kQueries / 8; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = 8 * j + 2 * t + (e & 1), key = key0 + 8 * (e >> 1), query = q0 + col;
        const float p = key <= query && query < T ? expf(st[j][e] * scale - q_lse[col]) : 0.0f;
        st[j][e] = p;
        dpt[j][e] = p * (dpt[j][e] - q_D[col]);
      }
    }
    accumulate_times_tile<HS, kQueries>(dv, st, do_tile);
    accumulate_times_tile<HS, kQueries>(dk, dpt, q_tile);
  }
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + 8 * r;
    if (key >= T) continue;
    bf16* dkrow = dqkv + hd.qkv + static_cast<size_t>(key) * hd.ld + s.C + 2 * t;
    bf16* dvrow = dkrow + s.C;
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dkrow + 8 * n) = pack_bf16(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t*>(dvrow + 8 * n) = pack_bf16(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// dQ of 16 * WARPS queries (16 per warp): S = Q K^T and dP = dO V^T per 32-key block, dQ +=
// [bf16]ds K. A warp whose queries see none of the block's keys (the last blocks of a 128-query
// tile) skips the block's products: they would add exact zeros. Launch bounds:
// backward_bf16_min_blocks.
template <int HS, int WARPS>
__global__ void __launch_bounds__(WARPS * kWarp, backward_bf16_min_blocks(HS, WARPS))
    backward_dq_bf16_kernel(BackwardArgs<bf16> args) {
  const auto [dqkv, dout, qkv, lse, D, s, scale] = args;
  constexpr int kQueries = 16 * WARPS, kKeys = kBackwardBlock, SP = kPaddedRow<HS>, kT = WARPS * kWarp;
  static_assert(kKeys % 16 == 0, "keys in 16-column steps");
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  // Q and dO stay; (K, V) of a key block are double-buffered: the next block's copy runs while
  // this one's products do. Buffer b at b * kBuffer from the first (computed pointers: an array
  // of them would live in local memory).
  constexpr int kBuffer = 2 * kKeys * SP;
  bf16* const sQ = reinterpret_cast<bf16*>(smem);  // (kQueries, SP)
  bf16* const sdO = sQ + kQueries * SP;            // (kQueries, SP)
  bf16* const sK = sdO + kQueries * SP;            // (2, kKeys, SP) at a stride of kBuffer
  bf16* const sV = sK + kKeys * SP;                // (2, kKeys, SP) at a stride of kBuffer
  const int T = s.T;
  const HeadRows<bf16> hd(qkv, s);
  const int q0 = last_tile_first(s, kQueries);
  const int warp = threadIdx.x / kWarp, g = threadIdx.x % kWarp / 4, t = threadIdx.x % 4;
  const int row0 = q0 + 16 * warp + g;

  hd.template load<HS, 8, kQueries, kT>(sQ, 0, q0);
  hd.template load_dout<HS, 8, kQueries, kT>(sdO, dout, q0);
  hd.template load<HS, 8, kKeys, kT>(sK, 1, 0);
  hd.template load<HS, 8, kKeys, kT>(sV, 2, 0);
  cp_async_commit();
  float row_lse[2], row_D[2];
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    row_lse[r] = row < T ? lse[hd.stat + row] : 0.0f;
    row_D[r] = row < T ? D[hd.stat + row] : 0.0f;
  }
  float dq[HS / 8][4] = {};
  const int last_key = min(T, q0 + kQueries) - 1;
  for (int c0 = 0, buf = 0; c0 <= last_key; c0 += kKeys, buf ^= 1) {
    cp_async_wait<0>();  // this thread's part of block c0 (and, the first time, of Q and dO)
    __syncthreads();     // everyone's; and everyone is done with the other buffer
    if (c0 + kKeys <= last_key) {
      hd.template load<HS, 8, kKeys, kT>(sK + (buf ^ 1) * kBuffer, 1, c0 + kKeys);
      hd.template load<HS, 8, kKeys, kT>(sV + (buf ^ 1) * kBuffer, 2, c0 + kKeys);
    }
    cp_async_commit();
    if (c0 > q0 + 16 * warp + 15) continue;  // the block's first key follows this warp's last query
    const bf16* const k_tile = sK + buf * kBuffer;
    float x[kKeys / 8][4] = {}, dp[kKeys / 8][4] = {};  // S and dP, then ds
    products_with_transposed<HS, kKeys>(x, dp, sQ, k_tile, sdO, sV + buf * kBuffer);
    #pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = c0 + 8 * j + 2 * t + (e & 1), row = row0 + 8 * (e >> 1), r = e >> 1;
        const float p = key <= row && row < T ? expf(x[j][e] * scale - row_lse[r]) : 0.0f;
        x[j][e] = p * (dp[j][e] - row_D[r]);
      }
    }
    accumulate_times_tile<HS, kKeys>(dq, x, k_tile);
  }
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = row0 + 8 * r;
    if (row >= T) continue;
    bf16* dqrow = dqkv + hd.qkv + static_cast<size_t>(row) * hd.ld + 2 * t;
    #pragma unroll
    for (int n = 0; n < HS / 8; ++n)
      *reinterpret_cast<uint32_t*>(dqrow + 8 * n) = pack_bf16(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
  }
}

// ---- fp32: quads of CUDA-core lanes -----------------------------------------------------------

// This lane's chunks of one row of HS floats: chunk tq + 4i (4 floats) for i < HS / 16.
template <int HS>
struct Slice {
  float4 c[HS / 16];
};

template <int HS>
__device__ inline Slice<HS> slice_at(const float* row, bool valid) {
  const int tq = threadIdx.x % 4;
  Slice<HS> r;
  #pragma unroll
  for (int i = 0; i < HS / 16; ++i)
    r.c[i] = valid ? *reinterpret_cast<const float4*>(row + 4 * (tq + 4 * i)) : make_float4(0.f, 0.f, 0.f, 0.f);
  return r;
}

template <int HS>
__device__ inline void store_slice(float* row, const Slice<HS>& x, float scale) {
  const int tq = threadIdx.x % 4;
  #pragma unroll
  for (int i = 0; i < HS / 16; ++i) {
    const float4 v = x.c[i];
    *reinterpret_cast<float4*>(row + 4 * (tq + 4 * i)) = make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale);
  }
}

// The full dot product of a's row with a shared row, in every lane of the quad.
template <int HS>
__device__ inline float quad_dot(const Slice<HS>& a, const float* shared_row) {
  const int tq = threadIdx.x % 4;
  float d = 0.0f;
  #pragma unroll
  for (int i = 0; i < HS / 16; ++i) {
    const float4 b = *reinterpret_cast<const float4*>(shared_row + 4 * (tq + 4 * i));
    d += a.c[i].x * b.x + a.c[i].y * b.y + a.c[i].z * b.z + a.c[i].w * b.w;
  }
  return quad_sum(d);
}

// acc += w * shared_row (this lane's chunks)
template <int HS>
__device__ inline void quad_axpy(Slice<HS>& acc, float w, const float* shared_row) {
  const int tq = threadIdx.x % 4;
  #pragma unroll
  for (int i = 0; i < HS / 16; ++i) {
    const float4 b = *reinterpret_cast<const float4*>(shared_row + 4 * (tq + 4 * i));
    acc.c[i].x += w * b.x;
    acc.c[i].y += w * b.y;
    acc.c[i].z += w * b.z;
    acc.c[i].w += w * b.w;
  }
}

constexpr int kFp32Rows = kThreads / 4;  // rows per block: one quad each
constexpr int kFp32Block = 32;           // keys (or queries) per shared tile

template <int HS>
__global__ void __launch_bounds__(kThreads)
    forward_fp32_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv,
                        AttentionShape s, float scale) {
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  float* sK = reinterpret_cast<float*>(smem);  // (kFp32Block, HS)
  float* sV = sK + kFp32Block * HS;            // (kFp32Block, HS)
  const int T = s.T;
  const HeadRows<float> hd(qkv, s);
  const int q0 = last_tile_first(s, kFp32Rows);
  const int row = q0 + threadIdx.x / 4;
  const Slice<HS> qs = slice_at<HS>(hd.q + static_cast<size_t>(row) * hd.ld, row < T);
  Slice<HS> acc{};
  float m = -INFINITY, l = 0.0f;
  const int last_key = min(T, q0 + kFp32Rows) - 1;
  for (int c0 = 0; c0 <= last_key; c0 += kFp32Block) {
    __syncthreads();
    hd.template load<HS, 0, kFp32Block>(sK, 1, c0);
    hd.template load<HS, 0, kFp32Block>(sV, 2, c0);
    tiles_arrived();
    float x[kFp32Block];
    float mx = -INFINITY;  // finite after the block: every row sees key c0
    #pragma unroll
    for (int j = 0; j < kFp32Block; ++j) {
      const float d = quad_dot<HS>(qs, sK + j * HS);
      x[j] = c0 + j <= row ? d * scale : -INFINITY;
      mx = fmaxf(mx, x[j]);
    }
    const float m_new = fmaxf(m, mx), alpha = expf(m - m_new);
    m = m_new;
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < kFp32Block; ++j) {
      x[j] = expf(x[j] - m);
      sum += x[j];
    }
    l = l * alpha + sum;
    #pragma unroll
    for (int i = 0; i < HS / 16; ++i) {
      acc.c[i].x *= alpha;
      acc.c[i].y *= alpha;
      acc.c[i].z *= alpha;
      acc.c[i].w *= alpha;
    }
    #pragma unroll
    for (int j = 0; j < kFp32Block; ++j) quad_axpy<HS>(acc, x[j], sV + j * HS);
  }
  if (row >= T) return;
  store_slice<HS>(out + hd.out + static_cast<size_t>(row) * s.C, acc, 1.0f / l);
  if (threadIdx.x % 4 == 0) lse[hd.stat + row] = m + logf(l);
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    backward_dkdv_fp32_kernel(BackwardArgs<float> args) {
  const auto [dqkv, dout, qkv, lse, D, s, scale] = args;
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  float* sQ = reinterpret_cast<float*>(smem);  // (kFp32Block, HS)
  float* sdO = sQ + kFp32Block * HS;           // (kFp32Block, HS)
  float* sLse = sdO + kFp32Block * HS;         // (kFp32Block)
  float* sD = sLse + kFp32Block;               // (kFp32Block)
  const int T = s.T;
  const HeadRows<float> hd(qkv, s);
  const int c0 = first_tile_first(s, kFp32Rows);
  const int key = c0 + threadIdx.x / 4;
  const Slice<HS> ks = slice_at<HS>(hd.q + s.C + static_cast<size_t>(key) * hd.ld, key < T);
  const Slice<HS> vs = slice_at<HS>(hd.q + 2 * s.C + static_cast<size_t>(key) * hd.ld, key < T);
  Slice<HS> dk{}, dv{};
  for (int q0 = c0; q0 < T; q0 += kFp32Block) {
    __syncthreads();
    hd.template load<HS, 0, kFp32Block>(sQ, 0, q0);
    hd.template load_dout<HS, 0, kFp32Block>(sdO, dout, q0);
    hd.load_query_stats(sLse, sD, lse, D, q0, kFp32Block);
    tiles_arrived();
    for (int i = 0; i < kFp32Block; ++i) {
      const int query = q0 + i;
      const float x = quad_dot<HS>(ks, sQ + i * HS), dp = quad_dot<HS>(vs, sdO + i * HS);
      const float p = key <= query && query < T ? expf(x * scale - sLse[i]) : 0.0f;
      quad_axpy<HS>(dv, p, sdO + i * HS);
      quad_axpy<HS>(dk, p * (dp - sD[i]), sQ + i * HS);
    }
  }
  if (key >= T) return;
  float* dkrow = dqkv + hd.qkv + static_cast<size_t>(key) * hd.ld + s.C;
  store_slice<HS>(dkrow, dk, scale);
  store_slice<HS>(dkrow + s.C, dv, 1.0f);
}

template <int HS>
__global__ void __launch_bounds__(kThreads)
    backward_dq_fp32_kernel(BackwardArgs<float> args) {
  const auto [dqkv, dout, qkv, lse, D, s, scale] = args;
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  float* sK = reinterpret_cast<float*>(smem);  // (kFp32Block, HS)
  float* sV = sK + kFp32Block * HS;            // (kFp32Block, HS)
  const int T = s.T;
  const HeadRows<float> hd(qkv, s);
  const int q0 = last_tile_first(s, kFp32Rows);
  const int row = q0 + threadIdx.x / 4;
  const Slice<HS> qs = slice_at<HS>(hd.q + static_cast<size_t>(row) * hd.ld, row < T);
  const Slice<HS> dos = slice_at<HS>(dout + hd.out + static_cast<size_t>(row) * s.C, row < T);
  const float row_lse = row < T ? lse[hd.stat + row] : 0.0f, row_D = row < T ? D[hd.stat + row] : 0.0f;
  Slice<HS> dq{};
  const int last_key = min(T, q0 + kFp32Rows) - 1;
  for (int c0 = 0; c0 <= last_key; c0 += kFp32Block) {
    __syncthreads();
    hd.template load<HS, 0, kFp32Block>(sK, 1, c0);
    hd.template load<HS, 0, kFp32Block>(sV, 2, c0);
    tiles_arrived();
    #pragma unroll
    for (int j = 0; j < kFp32Block; ++j) {
      const float x = quad_dot<HS>(qs, sK + j * HS), dp = quad_dot<HS>(dos, sV + j * HS);
      const float p = c0 + j <= row && row < T ? expf(x * scale - row_lse) : 0.0f;
      quad_axpy<HS>(dq, p * (dp - row_D), sK + j * HS);
    }
  }
  if (row >= T) return;
  store_slice<HS>(dqkv + hd.qkv + static_cast<size_t>(row) * hd.ld, dq, scale);
}

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

template <int HS>
constexpr size_t kBf16Row = static_cast<size_t>(kPaddedRow<HS>) * sizeof(bf16);

// Dynamic shared memory of a bf16 backward kernel: `resident` rows of two tiles (K and V, or Q
// and dO), two buffers of two streamed kBackwardBlock-row tiles, and for dK/dV two buffers of the
// streamed queries' lse and D.
template <int HS>
constexpr size_t backward_bf16_smem(int resident, bool query_stats) {
  return (2 * static_cast<size_t>(resident) + 4 * kBackwardBlock) * kBf16Row<HS> +
         (query_stats ? 4 * kBackwardBlock * sizeof(float) : 0);
}

template <int HS>
void forward(cudaStream_t stream, bf16* out, float* lse, const bf16* qkv, const AttentionShape& s, float scale) {
  constexpr int kWarpsHere = bf16_warps(HS);
  // Two buffers of a K and a V tile.
  launch(forward_bf16_kernel<HS, kWarpsHere>, tiles(s, 16 * kWarpsHere), kWarpsHere * kWarp,
         4 * math::kFlashKeyBlock * kBf16Row<HS>, stream, out, lse, qkv, s, scale);
}
template <int HS>
void forward(cudaStream_t stream, float* out, float* lse, const float* qkv, const AttentionShape& s, float scale) {
  launch(forward_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, 2 * kFp32Block * HS * sizeof(float), stream, out, lse, qkv,
         s, scale);
}
template <int HS>
void backward(cudaStream_t stream, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
              const AttentionShape& s, float scale) {
  const BackwardArgs<bf16> args{dqkv, dout, qkv, lse, D, s, scale};
  constexpr int kWarpsHere = bf16_warps(HS), kRows = 16 * kWarpsHere;
  launch(backward_dkdv_bf16_kernel<HS, kWarpsHere>, tiles(s, kRows), kWarpsHere * kWarp,
         backward_bf16_smem<HS>(kRows, true), stream, args);
  launch(backward_dq_bf16_kernel<HS, kWarpsHere>, tiles(s, kRows), kWarpsHere * kWarp,
         backward_bf16_smem<HS>(kRows, false), stream, args);
}
template <int HS>
void backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
              const AttentionShape& s, float scale) {
  const BackwardArgs<float> args{dqkv, dout, qkv, lse, D, s, scale};
  launch(backward_dkdv_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, (2 * kFp32Block * HS + 2 * kFp32Block) * sizeof(float),
         stream, args);
  launch(backward_dq_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, 2 * kFp32Block * HS * sizeof(float), stream, args);
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
