// Flash attention, bf16 storage on tensor cores (the arithmetic, the block layout and what both storages
// share: flash_attention.cuh).
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
//            resident), 32-query blocks (Q, dO, lse, D streamed); train.deterministic false:
//            also dQ's part from these keys, added into an fp32 sum by atomics (no dQ kernel)
//   dQ:      128 queries per block with 8 warps at head sizes 64 and 128, else 64 with 4 (Q, dO
//            resident), 32-key blocks (K, V streamed)
#pragma once

#include "cuda/kernels/flash_attention.cuh"

namespace xtrain::cuda::flash {

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
// A = the transpose of tile[col0 .. col0+15][row0 .. row0+15] (a tile stored k-major: ds^T as
// the dK/dV kernel holds it, read as ds), by .trans: A's block (rows 8(m & 1), cols 8(m >> 1)) is
// the transpose of the stored block (rows 8(m >> 1), cols 8(m & 1)).
__device__ inline FragA load_a_transposed(const bf16* tile, int stride, int row0, int col0) {
  const int lane = threadIdx.x % kWarp, m = lane / 8;
  FragA f;
  ldmatrix_x4_trans(f.x, tile + (col0 + lane % 8 + 8 * (m >> 1)) * stride + row0 + 8 * (m & 1));
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

// The dK/dV kernel's part of dQ for one 32-query block (train.deterministic false): ds, stored
// in shared memory as ds^T (keys x queries, bf16, the same rounding as the dQ kernel's), times
// the block's K tile, for the keys the block's queries see (`keys`, a multiple of 16), added by
// atomics (atomic_add_pair: two columns each) into the head's rows of the fp32 sum, unscaled
// (dq_head: its first row of the (B,T,C) sum; C, T the shape's). The 32 x HS part is cut into
// 16 x 16 pieces: warp w takes rows 16 (w % 2) and columns 16 j for j = w / 2, w / 2 + WARPS / 2,
// ... Each piece sums its keys in a fixed order; the pieces of different key tiles meet in the
// sum in whatever order the atomics land, which is what makes dQ vary in its last bits.
template <int HS, int WARPS, int QUERIES>
__device__ inline void add_dq_part(float* dq_head, const bf16* s_ds, const bf16* s_k, int C, int T, int q0, int keys) {
  constexpr int SQ = QUERIES + 8, SP = kPaddedRow<HS>;
  static_assert(QUERIES == 32, "two 16-row pieces: warps pair up on them");
  const int warp = threadIdx.x / kWarp, g = threadIdx.x % kWarp / 4, t = threadIdx.x % 4;
  const int rows = 16 * (warp % 2);
  #pragma unroll 1
  for (int j = warp / 2; j < HS / 16; j += WARPS / 2) {
    float part[2][4] = {};
    for (int kk = 0; kk < keys / 16; ++kk) {
      const FragA a = load_a_transposed(s_ds, SQ, rows, 16 * kk);
      FragB b[2];
      load_b(b, s_k, SP, 16 * kk, 16 * j);
      mma_bf16(part[0], a, b[0]);
      mma_bf16(part[1], a, b[1]);
    }
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int query = q0 + rows + g + 8 * r;
      if (query >= T) continue;
      float* row = dq_head + static_cast<size_t>(query) * C + 16 * j + 2 * t;
      #pragma unroll
      for (int i = 0; i < 2; ++i) atomic_add_pair(row + 8 * i, part[i][2 * r], part[i][2 * r + 1]);
    }
  }
}

// dK and dV of 16 * WARPS keys (16 per warp): S^T = K Q^T and dP^T = V dO^T per 32-query block,
// then dV += [bf16]p^T dO and dK += [bf16]ds^T Q. A warp whose keys no query of the block sees
// (the first blocks of a 128-key tile) skips the block's products: they would add exact zeros.
// ADD_DQ (train.deterministic false): also dQ's part from these keys (add_dq_part), so the
// backward needs no dQ kernel: 5 tile products instead of 7. Launch bounds:
// backward_bf16_min_blocks.
template <int HS, int WARPS, bool ADD_DQ>
__global__ void __launch_bounds__(WARPS * kWarp, backward_bf16_min_blocks(HS, WARPS))
    backward_dkdv_bf16_kernel(BackwardArgs<bf16> args, float* __restrict__ dq_sum) {
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
  bf16* const sdS = reinterpret_cast<bf16*>(sLse + 2 * kStats);  // ADD_DQ: (kKeys, kQueries + 8), ds^T
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
    __syncthreads();     // everyone's; and everyone is done with the other buffer (and with sdS)
    const int next = buf ^ 1;
    if (q0 + kQueries < T) {
      hd.template load<HS, 8, kQueries, kT>(sQ + next * kBuffer, 0, q0 + kQueries);
      hd.template load_dout<HS, 8, kQueries, kT>(sdO + next * kBuffer, dout, q0 + kQueries);
    }
    cp_async_commit();
    if (q0 + kQueries < T) {
      hd.template load_query_stats<kT>(sLse + next * kStats, sD + next * kStats, lse, D, q0 + kQueries, kQueries);
    }
    // Whether the block's last query follows this warp's first key. A warp that sees none skips
    // the products; with dQ's part it still meets the block at the barrier below.
    const bool sees = q0 + kQueries > c0 + 16 * warp;
    if (!ADD_DQ && !sees) continue;
    if (sees) {
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
      if constexpr (ADD_DQ) {
        #pragma unroll
        for (int j = 0; j < kQueries / 8; ++j) {
          #pragma unroll
          for (int r = 0; r < 2; ++r) {
            *reinterpret_cast<uint32_t*>(sdS + (16 * warp + g + 8 * r) * (kQueries + 8) + 8 * j + 2 * t) =
                pack_bf16(dpt[j][2 * r], dpt[j][2 * r + 1]);
          }
        }
      }
    }
    if constexpr (ADD_DQ) {
      __syncthreads();  // every warp's ds^T rows
      // The warps whose keys the block's queries see: q0 - c0 is a multiple of kQueries.
      add_dq_part<HS, WARPS, kQueries>(dq_sum + hd.out, sdS, sK, s.C, T, q0, min(kKeys, q0 + kQueries - c0));
    }
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

// dq (the q part of dqkv, bf16) = [bf16] scale dq_sum, 8 columns a thread by 16-byte accesses
// (C is a multiple of 8: every head size is).
__global__ void __launch_bounds__(256)
    dq_from_sum_kernel(bf16* __restrict__ dqkv, const float* __restrict__ dq_sum, size_t rows, int C, float scale) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x, per_row = C / 8;
  if (i >= rows * per_row) return;
  const size_t row = i / per_row, col = i % per_row * 8;
  float x[8];
  load_floats(dq_sum + row * C + col, x);
  #pragma unroll
  for (int j = 0; j < 8; ++j) x[j] *= scale;
  store_pack(dqkv + row * 3 * C + col, x);
}

// ---- launchers --------------------------------------------------------------------------------

template <int HS>
constexpr size_t kBf16Row = static_cast<size_t>(kPaddedRow<HS>) * sizeof(bf16);

// Dynamic shared memory of a bf16 backward kernel: `resident` rows of two tiles (K and V, or Q
// and dO), two buffers of two streamed kBackwardBlock-row tiles, and for dK/dV two buffers of the
// streamed queries' lse and D, and with dQ's part the block's ds^T (resident x kBackwardBlock,
// rows padded by 8).
template <int HS>
constexpr size_t backward_bf16_smem(int resident, bool query_stats, bool ds = false) {
  return (2 * static_cast<size_t>(resident) + 4 * kBackwardBlock) * kBf16Row<HS> +
         (query_stats ? 4 * kBackwardBlock * sizeof(float) : 0) +
         (ds ? static_cast<size_t>(resident) * (kBackwardBlock + 8) * sizeof(bf16) : 0);
}

template <int HS>
void forward(cudaStream_t stream, bf16* out, float* lse, const bf16* qkv, const AttentionShape& s, float scale) {
  constexpr int kWarpsHere = bf16_warps(HS);
  // Two buffers of a K and a V tile.
  launch(forward_bf16_kernel<HS, kWarpsHere>, tiles(s, 16 * kWarpsHere), kWarpsHere * kWarp,
         4 * math::kFlashKeyBlock * kBf16Row<HS>, stream, out, lse, qkv, s, scale);
}
// dq_sum null: the deterministic backward (dK/dV kernel, dQ kernel: 7 tile products). Otherwise
// (B,T,C) floats of scratch, 16-byte aligned: the dK/dV kernel adds dQ's parts there by atomics
// (5 products), and a pass rounds the sum into dqkv.
template <int HS>
void backward(cudaStream_t stream, bf16* dqkv, const bf16* dout, const bf16* qkv, const float* lse, const float* D,
              float* dq_sum, const AttentionShape& s, float scale) {
  const BackwardArgs<bf16> args{dqkv, dout, qkv, lse, D, s, scale};
  constexpr int kWarpsHere = bf16_warps(HS), kRows = 16 * kWarpsHere;
  if (dq_sum == nullptr) {
    launch(backward_dkdv_bf16_kernel<HS, kWarpsHere, false>, tiles(s, kRows), kWarpsHere * kWarp,
           backward_bf16_smem<HS>(kRows, true), stream, args, dq_sum);
    launch(backward_dq_bf16_kernel<HS, kWarpsHere>, tiles(s, kRows), kWarpsHere * kWarp,
           backward_bf16_smem<HS>(kRows, false), stream, args);
    return;
  }
  const size_t rows = static_cast<size_t>(s.B) * s.T;
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(dq_sum, 0, rows * s.C * sizeof(float), stream));
  launch(backward_dkdv_bf16_kernel<HS, kWarpsHere, true>, tiles(s, kRows), kWarpsHere * kWarp,
         backward_bf16_smem<HS>(kRows, true, true), stream, args, dq_sum);
  launch_kernel(dq_from_sum_kernel, blocks_for(rows * (s.C / 8), 256), 256, 0, stream, dqkv, dq_sum, rows, s.C, scale);
}

}  // namespace xtrain::cuda::flash
