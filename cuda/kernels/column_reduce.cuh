// Deterministic column sums of a row-major (rows, cols) quantity: out_k[c] += scale * sum_r v_k(r, c).
// Used for every parameter gradient that sums over positions (bias gradients, layernorm weight
// and bias gradients). Atomics would make the bits depend on scheduling, so instead:
//   pass 1: the rows are cut into G groups fixed by `rows` alone; block (column tile, group) sums
//           its group in a fixed order (thread row ty takes rows ty, ty+8, ...; then ty = 0..7);
//   pass 2: one thread per column adds the G group sums in group order.
// Reads are coalesced: a warp covers 32 consecutive columns of one row.
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/model/cuda_buffers.hpp"

namespace xtrain::cuda {

constexpr int kColumnTile = 32;
// The row groups (and so the scratch) are worker/model/cuda_buffers.hpp's, which the memory plan counts.
using cuda_buffers::column_groups;
using cuda_buffers::column_reduce_scratch_floats;
using cuda_buffers::kColumnRowThreads;

// RowValues: __device__ void operator()(int row, int col, float (&v)[K]) const.
template <int K, class RowValues>
__global__ void column_partials_kernel(float* partials, int rows, int cols, int rows_per_group, RowValues values) {
  XTRAIN_SHARED(float, tile, [K][kColumnRowThreads][kColumnTile + 1]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * kColumnTile + tx;
  const int group = blockIdx.y;
  const int begin = group * rows_per_group;
  const int end = min(rows, begin + rows_per_group);
  float acc[K];
#pragma unroll
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (col < cols) {
    for (int r = begin + ty; r < end; r += kColumnRowThreads) {
      float v[K];
      values(r, col, v);
#pragma unroll
      for (int k = 0; k < K; ++k) acc[k] += v[k];
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) tile[k][ty][tx] = acc[k];
  __syncthreads();
  if (ty == 0 && col < cols) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float s = tile[k][0][tx];
      for (int j = 1; j < kColumnRowThreads; ++j) s += tile[k][j][tx];
      partials[(static_cast<size_t>(group) * K + k) * cols + col] = s;
    }
  }
}

template <int K>
struct ColumnOutputs {
  float* out[K];
};

template <int K>
__global__ void column_finish_kernel(ColumnOutputs<K> outs, const float* partials, int groups, int cols, float scale) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= cols) return;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    float s = 0.0f;
    for (int g = 0; g < groups; ++g) s += partials[(static_cast<size_t>(g) * K + k) * cols + col];
    outs.out[k][col] += scale * s;
  }
}

// `partials` holds column_reduce_scratch_floats(K, rows, cols) floats.
template <int K, class RowValues>
void column_reduce(cudaStream_t stream, ColumnOutputs<K> outs, float* partials, int rows, int cols, float scale,
                   RowValues values) {
  if (rows <= 0 || cols <= 0) return;
  const int groups = column_groups(rows);
  const int rows_per_group = (rows + groups - 1) / groups;
  const dim3 grid(blocks_for(cols, kColumnTile), groups);
  const dim3 block(kColumnTile, kColumnRowThreads);
  launch_kernel(column_partials_kernel<K, RowValues>, grid, block, 0, stream, partials, rows, cols, rows_per_group, values);
  constexpr unsigned kThreads = 256;
  launch_kernel(column_finish_kernel<K>, blocks_for(cols, kThreads), kThreads, 0, stream, outs, partials, groups, cols, scale);
}

// The bias gradient's values: dout itself, as fp32.
template <class T>
struct MatrixValues {
  const T* m;  // (rows, cols)
  int cols;
  __device__ void operator()(int row, int col, float (&v)[1]) const {
    v[0] = load_f32(m[static_cast<size_t>(row) * cols + col]);
  }
};

}  // namespace xtrain::cuda
