// LayerNorm forward and backward, one warp per row (rows are C = 64..1600 floats: a warp's
// lanes stride the row, coalesced, and the row stays in L1 between the passes). Reductions are
// xor-shuffle trees: a fixed order, so the results are deterministic. The per-element math is
// worker/math/layernorm.hpp's, shared with the CPU backend.
//
// Backward's weight and bias gradients sum over rows: the deterministic column sums of
// column_reduce.cuh, not atomics. Storage T (float or bf16) for the rows, the weights and dinp;
// statistics, sums and the parameter gradients in fp32. dinp += d: read, add in fp32, store.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/common.cuh"
#include "worker/math/layernorm.hpp"

namespace xtrain::cuda {

constexpr int kLayerNormRowsPerBlock = 8;  // warps per block

template <class T>
__global__ void layernorm_forward_kernel(T* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                                         const T* __restrict__ inp, const T* __restrict__ weight,
                                         const T* __restrict__ bias, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kLayerNormRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const T* x = inp + static_cast<size_t>(row) * C;
  // Two passes, as math::layernorm_row_stats: the mean, then the centred variance.
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp) sum += load_f32(x[i]);
  const float m = warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float d = load_f32(x[i]) - m;
    sq += d * d;
  }
  const math::RowStats s{m, 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + math::kLayerNormEps)};
  T* o = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += kWarp) {
    o[i] = store_as<T>((load_f32(x[i]) - s.mean) * s.rstd * load_f32(weight[i]) + load_f32(bias[i]));
  }
  if (lane == 0) {
    mean[row] = s.mean;
    rstd[row] = s.rstd;
  }
}

// dinp += d/dinp for each row.
template <class T>
__global__ void layernorm_backward_dinp_kernel(T* __restrict__ dinp, const T* __restrict__ dout,
                                               const T* __restrict__ inp, const T* __restrict__ weight,
                                               const float* __restrict__ mean, const float* __restrict__ rstd,
                                               int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kLayerNormRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const math::RowStats s{mean[row], rstd[row]};
  float sg = 0.0f, sgn = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float g = load_f32(dout[base + i]) * load_f32(weight[i]);
    sg += g;
    sgn += g * (load_f32(inp[base + i]) - s.mean) * s.rstd;
  }
  const math::LayerNormBackwardSums r{warp_sum(sg) / static_cast<float>(C), warp_sum(sgn) / static_cast<float>(C)};
  for (int i = lane; i < C; i += kWarp) {
    const float d = math::layernorm_dinp(load_f32(dout[base + i]), load_f32(inp[base + i]), load_f32(weight[i]), s, r);
    dinp[base + i] = store_as<T>(load_f32(dinp[base + i]) + d);
  }
}

// (dweight, dbias) values of one element: (dout * normalised input, dout).
template <class T>
struct LayerNormParamGradValues {
  const T* dout;
  const T* inp;
  const float* mean;
  const float* rstd;
  int C;
  __device__ void operator()(int row, int col, float (&v)[2]) const {
    const size_t i = static_cast<size_t>(row) * C + col;
    const float d = load_f32(dout[i]);
    v[0] = d * ((load_f32(inp[i]) - mean[row]) * rstd[row]);
    v[1] = d;
  }
};

template <class T>
void layernorm_forward(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C) {
  if (N <= 0) return;
  launch_kernel(layernorm_forward_kernel<T>, blocks_for(N, kLayerNormRowsPerBlock), kLayerNormRowsPerBlock * kWarp, 0, stream, out, mean, rstd, inp, weight, bias, N, C);
}

inline size_t layernorm_backward_scratch_floats(int N, int C) { return column_reduce_scratch_floats(2, N, C); }

template <class T>
void layernorm_backward(cudaStream_t stream, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C, float* scratch) {
  if (N <= 0) return;
  launch_kernel(layernorm_backward_dinp_kernel<T>, blocks_for(N, kLayerNormRowsPerBlock), kLayerNormRowsPerBlock * kWarp, 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
  column_reduce<2>(stream, {{dweight, dbias}}, scratch, N, C, 1.0f,
                   LayerNormParamGradValues<T>{dout, inp, mean, rstd, C});
}

}  // namespace xtrain::cuda
