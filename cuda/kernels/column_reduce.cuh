// Deterministic column sums of a row-major (rows, cols) quantity: out_k[c] += scale * sum_r v_k(r, c).
// Used for the parameter gradients that sum over positions (bias gradients; layernorm weight and
// bias gradients on layernorm.cuh's element path, whose row path writes the same group partials
// itself and shares column_finish_kernel). Atomics would make the bits depend on scheduling, so instead:
//   pass 1: the rows are cut into G groups fixed by `rows` alone; block (column tile, group) sums
//           its group in a fixed order (thread row ty takes rows ty, ty+8, ...; then ty = 0..7);
//   pass 2: one thread per column adds the G group sums in group order.
// Reads are coalesced: a warp covers 32 consecutive columns (or 32 packs of them) of one row.
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

// RowValues: template <int kVec> __device__ void load(int row, int col, float (&v)[K][kVec]) const,
// the values of columns col .. col + kVec - 1. A thread sums kVec adjacent columns: kVec = 1, or
// one 16-byte pack of the values' storage (then cols is a multiple of kVec and the rows aligned).
template <int K, int kVec, class RowValues>
__global__ void column_partials_kernel(float* partials, int rows, int cols, int rows_per_group, RowValues values) {
  XTRAIN_SHARED(float, tile, [K][kColumnRowThreads][kColumnTile * kVec + 1]);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = (blockIdx.x * kColumnTile + tx) * kVec;  // the first of the thread's columns
  const int group = blockIdx.y;
  const int begin = group * rows_per_group;
  const int end = min(rows, begin + rows_per_group);
  float acc[K][kVec];
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) acc[k][j] = 0.0f;
  }
  if (col < cols) {
    for (int r = begin + ty; r < end; r += kColumnRowThreads) {
      float v[K][kVec];
      values.template load<kVec>(r, col, v);
#pragma unroll
      for (int k = 0; k < K; ++k) {
#pragma unroll
        for (int j = 0; j < kVec; ++j) acc[k][j] += v[k][j];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) {
#pragma unroll
    for (int j = 0; j < kVec; ++j) tile[k][ty][tx * kVec + j] = acc[k][j];
  }
  __syncthreads();
  if (ty == 0 && col < cols) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        float s = tile[k][0][tx * kVec + j];
        for (int t = 1; t < kColumnRowThreads; ++t) s += tile[k][t][tx * kVec + j];
        partials[(static_cast<size_t>(group) * K + k) * cols + col + j] = s;
      }
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

// `partials` holds column_reduce_scratch_floats(K, rows, cols) floats. kVec as column_partials_kernel's.
template <int K, int kVec = 1, class RowValues>
void column_reduce(cudaStream_t stream, ColumnOutputs<K> outs, float* partials, int rows, int cols, float scale,
                   RowValues values) {
  if (rows <= 0 || cols <= 0) return;
  const int groups = column_groups(rows);
  const int rows_per_group = (rows + groups - 1) / groups;
  const dim3 grid(blocks_for(cols, kColumnTile * kVec), groups);
  const dim3 block(kColumnTile, kColumnRowThreads);
  launch_kernel(column_partials_kernel<K, kVec, RowValues>, grid, block, 0, stream, partials, rows, cols, rows_per_group, values);
  constexpr unsigned kThreads = 256;
  launch_kernel(column_finish_kernel<K>, blocks_for(cols, kThreads), kThreads, 0, stream, outs, partials, groups, cols, scale);
}

// The bias gradient's values: dout itself, as fp32, by packs (kVec = Pack<T>::kCount) or one by one.
template <class T>
struct MatrixValues {
  const T* m;  // (rows, cols)
  int cols;
  template <int kVec>
  __device__ void load(int row, int col, float (&v)[1][kVec]) const {
    const T* p = m + static_cast<size_t>(row) * cols + col;
    if constexpr (kVec == 1) {
      v[0][0] = load_f32(*p);
    } else {
      static_assert(kVec == Pack<T>::kCount, "one 16-byte pack");
      load_pack(p, v[0]);
    }
  }
};

// Sums dout's columns: by packs when dout is 16-byte aligned and cols a multiple of a pack (so
// every row is), element by element otherwise.
template <class T>
void column_sums(cudaStream_t stream, float* out, float* partials, const T* m, int rows, int cols, float scale) {
  constexpr int kPer = Pack<T>::kCount;
  if (aligned16(m) && cols % kPer == 0) {
    column_reduce<1, kPer>(stream, {{out}}, partials, rows, cols, scale, MatrixValues<T>{m, cols});
  } else {
    column_reduce<1>(stream, {{out}}, partials, rows, cols, scale, MatrixValues<T>{m, cols});
  }
}

}  // namespace xtrain::cuda
