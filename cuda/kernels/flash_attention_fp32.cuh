// Flash attention, fp32 storage on CUDA cores (the arithmetic, the block layout and what both storages
// share: flash_attention.cuh).
//
// fp32 storage (CUDA cores, strict fp32 for the fp32 and tf32 precisions):
//   four lanes per row (a quad), each holding a quarter of the head dimension as float4 chunks
//   (chunk tq + 4i for lane tq, so a quad reads 64 contiguous bytes of a shared row); a dot product
//   is the quad's partial sums reduced by two xor shuffles. 32 rows per block, 32-key or 32-query
//   blocks in shared memory, fp32 rows unpadded (a quad's chunks are contiguous, all quads read the
//   same row: a broadcast), loaded by cp.async and waited for at once (no double buffering).
#pragma once

#include "cuda/kernels/flash_attention.cuh"

namespace xtrain::cuda::flash {

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
// Every fp32 kernel is bounded at two blocks an SM. That still allows 255 registers a thread, but
// with no block count ptxas picks a register target of its own, for occupancy, and spills to meet
// it: CI's build once gave the dQ kernel at head size 32 a 24-byte stack frame on sm_80 at 56
// registers, where ptxas 13.0.88 gives 59 and none. With the bound it takes what each kernel needs
// (80 to 232 registers with 13.0.88) and spills nothing at any head size.
constexpr int kFp32BlocksPerSm = 2;

// A query-side block (forward, dQ): this quad's query row and its q, and the shared K and V
// tiles of the key blocks it walks, keys 0 .. last_key (the last its rows see).
template <int HS>
struct QueryQuad {
  float* sK;  // (kFp32Block, HS)
  float* sV;  // (kFp32Block, HS)
  HeadRows<float> hd;
  int row;
  Slice<HS> qs;
  int last_key;

  __device__ QueryQuad(unsigned char* smem, const float* qkv, const AttentionShape& s)
      : sK(reinterpret_cast<float*>(smem)), sV(sK + kFp32Block * HS), hd(qkv, s) {
    const int q0 = last_tile_first(s, kFp32Rows);
    row = q0 + threadIdx.x / 4;
    qs = slice_at<HS>(hd.q + static_cast<size_t>(row) * hd.ld, row < s.T);
    last_key = min(s.T, q0 + kFp32Rows) - 1;
  }
  // Keys c0 .. c0 + kFp32Block - 1 into sK and sV, once every thread is done with the last ones.
  __device__ void load_keys(int c0) const {
    __syncthreads();
    hd.template load<HS, 0, kFp32Block>(sK, 1, c0);
    hd.template load<HS, 0, kFp32Block>(sV, 2, c0);
    tiles_arrived();
  }
};

template <int HS>
__global__ void __launch_bounds__(kThreads, kFp32BlocksPerSm)
    forward_fp32_kernel(float* __restrict__ out, float* __restrict__ lse, const float* __restrict__ qkv,
                        AttentionShape s, float scale) {
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  const QueryQuad<HS> qq(smem, qkv, s);
  const auto [sK, sV, hd, row, qs, last_key] = qq;
  Slice<HS> acc{};
  float m = -INFINITY, l = 0.0f;
  for (int c0 = 0; c0 <= last_key; c0 += kFp32Block) {
    qq.load_keys(c0);
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
  if (row >= s.T) return;
  store_slice<HS>(out + hd.out + static_cast<size_t>(row) * s.C, acc, 1.0f / l);
  if (threadIdx.x % 4 == 0) lse[hd.stat + row] = m + logf(l);
}

template <int HS>
__global__ void __launch_bounds__(kThreads, kFp32BlocksPerSm)
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
__global__ void __launch_bounds__(kThreads, kFp32BlocksPerSm)
    backward_dq_fp32_kernel(BackwardArgs<float> args) {
  const auto [dqkv, dout, qkv, lse, D, s, scale] = args;
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  const QueryQuad<HS> qq(smem, qkv, s);
  const auto [sK, sV, hd, row, qs, last_key] = qq;
  const int T = s.T;
  const Slice<HS> dos = slice_at<HS>(dout + hd.out + static_cast<size_t>(row) * s.C, row < T);
  const float row_lse = row < T ? lse[hd.stat + row] : 0.0f, row_D = row < T ? D[hd.stat + row] : 0.0f;
  Slice<HS> dq{};
  for (int c0 = 0; c0 <= last_key; c0 += kFp32Block) {
    qq.load_keys(c0);
    // Half the tile per unrolled body: fully unrolled, ptxas for sm_90 spills a register at head
    // size 32 (an 8-byte stack frame), which the kernel-resources test refuses; the order of the
    // sums is the same either way.
    #pragma unroll 16
    for (int j = 0; j < kFp32Block; ++j) {
      const float x = quad_dot<HS>(qs, sK + j * HS), dp = quad_dot<HS>(dos, sV + j * HS);
      const float p = c0 + j <= row && row < T ? expf(x * scale - row_lse) : 0.0f;
      quad_axpy<HS>(dq, p * (dp - row_D), sK + j * HS);
    }
  }
  if (row >= T) return;
  store_slice<HS>(dqkv + hd.qkv + static_cast<size_t>(row) * hd.ld, dq, scale);
}

// ---- launchers --------------------------------------------------------------------------------

template <int HS>
void forward(cudaStream_t stream, float* out, float* lse, const float* qkv, const AttentionShape& s, float scale) {
  launch(forward_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, 2 * kFp32Block * HS * sizeof(float), stream, out, lse, qkv,
         s, scale);
}
template <int HS>
void backward(cudaStream_t stream, float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
              const AttentionShape& s, float scale) {
  const BackwardArgs<float> args{dqkv, dout, qkv, lse, D, s, scale};
  launch(backward_dkdv_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, (2 * kFp32Block * HS + 2 * kFp32Block) * sizeof(float),
         stream, args);
  launch(backward_dq_fp32_kernel<HS>, tiles(s, kFp32Rows), kThreads, 2 * kFp32Block * HS * sizeof(float), stream, args);
}

}  // namespace xtrain::cuda::flash
