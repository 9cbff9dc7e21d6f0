// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row (rows are C = 64..1600 channels). Reductions are xor-shuffle trees and fixed-order loops:
// the results are deterministic. The per-element math is worker/math/layernorm.hpp's, shared with
// the CPU backend.
//
// Two paths, chosen per call:
// - the row path, when C is a multiple of a 16-byte pack (8 bf16, 4 floats), every pointer is
//   16-byte aligned and the row fits a warp's registers (C <= 2048 forward; backward, which holds
//   two rows and two sums per lane, C <= 1792 in bf16 and 1536 in fp32, the widest that compile
//   without spilling): lane l holds packs l, l+32, ... of its row in registers (RowSlots), so each
//   tensor is read once, by 16-byte loads, and written once:
//     forward:  residual = a + b (rounded as stored), then the layernorm of the stored residual;
//     backward: dinp += d/dinp and the block's share of the weight and bias gradients, summed
//               over its rows in registers, then over its warps in warp order (shared memory),
//               then over the blocks in block order (column_finish_kernel): no second pass over
//               dout and inp, and no atomics;
// - the element path otherwise (odd C, unaligned views, very wide rows): lanes stride the row
//   element by element (the row stays in L1 between its passes), the residual add is the
//   elementwise kernel, and the parameter gradients are column_reduce.cuh's sums.
// Storage T (float or bf16) for the rows, the weights and dinp; statistics, sums and the
// parameter gradients in fp32. Both paths round at the same points (the residual once, each
// output once), so they differ from each other and from the CPU only in the order of fp32 sums.
#pragma once

#include <initializer_list>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/common.cuh"
#include "cuda/kernels/elementwise.cuh"
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
  template <int kVec>
  __device__ void load(int row, int col, float (&v)[2][kVec]) const {
    static_assert(kVec == 1, "the element path");
    const size_t i = static_cast<size_t>(row) * C + col;
    const float d = load_f32(dout[i]);
    v[0][0] = d * ((load_f32(inp[i]) - mean[row]) * rstd[row]);
    v[1][0] = d;
  }
};

// ---- the row path ----------------------------------------------------------------------------

// A warp's row in registers: lane l's slot k is pack l + 32 k (kPer elements), if the row has it.
// The widest rows each kernel takes, in floats per lane: the forward holds one row (C <= 2048);
// the backward holds dout's and inp's rows and the weight and bias gradients' sums, and above 56
// (bf16) or 48 (fp32) it spills to local memory (ptxas, sm_80 and sm_90), so wider rows take the
// element path.
constexpr int kRowForwardMaxFloatsPerLane = 64;
constexpr int kRowBackwardMaxFloatsPerLane = 56;
// At most 24 floats per lane (C <= 768), the backward fits 128 registers, so two 8-warp blocks
// share an SM: 16 warps of loads in flight instead of 8, and the 256 groups one wave on 132 SMs.
constexpr int kRowBackwardTwoBlocksFloatsPerLane = 24;

template <class T, int kSlots>
struct RowSlots {
  static constexpr int kPer = Pack<T>::kCount;
  float v[kSlots][kPer];
  __device__ static bool has(int slot, int lane, int packs) { return lane + slot * kWarp < packs; }
  __device__ static size_t offset(int slot, int lane) { return static_cast<size_t>(lane + slot * kWarp) * kPer; }
};

// residual = a + b (rounded as T), out = layernorm(residual); with b == nullptr, the layernorm of a
// (residual unused). residual may alias a or b: a lane reads its packs before it writes them.
template <class T, int kSlots>
__global__ void row_layernorm_forward_kernel(T* residual, T* __restrict__ out, float* __restrict__ mean,
                                             float* __restrict__ rstd, const T* a, const T* b,
                                             const T* __restrict__ weight, const T* __restrict__ bias, int N, int C) {
  using Row = RowSlots<T, kSlots>;
  constexpr int kPer = Row::kPer;
  const int lane = threadIdx.x % kWarp;
  const int row = blockIdx.x * kLayerNormRowsPerBlock + threadIdx.x / kWarp;
  if (row >= N) return;
  const int packs = C / kPer;
  const size_t base = static_cast<size_t>(row) * C;
  Row x{};
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if (!Row::has(k, lane, packs)) continue;
    const size_t i = base + Row::offset(k, lane);
    load_pack(a + i, x.v[k]);
    if (b != nullptr) {
      float y[kPer];
      load_pack(b + i, y);
#pragma unroll
      for (int j = 0; j < kPer; ++j) x.v[k][j] = rounded_as<T>(x.v[k][j] + y[j]);
      store_pack(residual + i, x.v[k]);  // exact: the values are T's already
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) sum += x.v[k][j];
  }
  // Two passes, as math::layernorm_row_stats: the mean, then the centred variance.
  const float m = warp_sum(sum) / static_cast<float>(C);
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if (!Row::has(k, lane, packs)) continue;
#pragma unroll
    for (int j = 0; j < kPer; ++j) sq += (x.v[k][j] - m) * (x.v[k][j] - m);
  }
  const math::RowStats s{m, 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + math::kLayerNormEps)};
#pragma unroll
  for (int k = 0; k < kSlots; ++k) {
    if (!Row::has(k, lane, packs)) continue;
    float w[kPer], bb[kPer], y[kPer];
    load_pack(weight + Row::offset(k, lane), w);
    load_pack(bias + Row::offset(k, lane), bb);
#pragma unroll
    for (int j = 0; j < kPer; ++j) y[j] = (x.v[k][j] - s.mean) * s.rstd * w[j] + bb[j];
    store_pack(out + base + Row::offset(k, lane), y);
  }
  if (lane == 0) {
    mean[row] = s.mean;
    rstd[row] = s.rstd;
  }
}

// dinp += d/dinp for the rows of group blockIdx.x, and the group's sums of the weight and bias
// gradients: partials (groups, 2, C), the layout column_finish_kernel<2> adds up. Warp w takes the
// group's rows w, w + 8, ... in order; its lanes keep their columns' sums in registers. The weight
// is read again for each row (from L1: every warp reads the same C values) rather than held, which
// keeps C = 768 in bf16 under 128 registers. Dynamic shared memory: 2 C floats.
template <class T, int kSlots>
__global__ void __launch_bounds__(kLayerNormRowsPerBlock * kWarp,
                                  kSlots * Pack<T>::kCount <= kRowBackwardTwoBlocksFloatsPerLane ? 2 : 1)
    row_layernorm_backward_kernel(T* __restrict__ dinp, float* __restrict__ partials, const T* __restrict__ dout,
                                  const T* __restrict__ inp, const T* __restrict__ weight,
                                  const float* __restrict__ mean, const float* __restrict__ rstd, int N, int C,
                                  int rows_per_group) {
  XTRAIN_DYNAMIC_SHARED(unsigned char, smem);
  float* block_sums = reinterpret_cast<float*>(smem);  // (2, C): dweight, dbias
  using Row = RowSlots<T, kSlots>;
  constexpr int kPer = Row::kPer;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int packs = C / kPer;
  const int begin = blockIdx.x * rows_per_group;
  const int end = min(N, begin + rows_per_group);
  Row dw{}, db{};
  for (int row = begin + warp; row < end; row += kLayerNormRowsPerBlock) {
    const size_t base = static_cast<size_t>(row) * C;
    const math::RowStats s{mean[row], rstd[row]};
    Row d{}, x{};
    float sg = 0.0f, sgn = 0.0f;
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      if (!Row::has(k, lane, packs)) continue;
      load_pack(dout + base + Row::offset(k, lane), d.v[k]);
      load_pack(inp + base + Row::offset(k, lane), x.v[k]);
      float w[kPer];
      load_pack(weight + Row::offset(k, lane), w);
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        const float g = d.v[k][j] * w[j];
        sg += g;
        sgn += g * (x.v[k][j] - s.mean) * s.rstd;
      }
    }
    const math::LayerNormBackwardSums r{warp_sum(sg) / static_cast<float>(C), warp_sum(sgn) / static_cast<float>(C)};
#pragma unroll
    for (int k = 0; k < kSlots; ++k) {
      if (!Row::has(k, lane, packs)) continue;
      T* di = dinp + base + Row::offset(k, lane);
      float acc[kPer], w[kPer];
      load_pack(di, acc);
      load_pack(weight + Row::offset(k, lane), w);
#pragma unroll
      for (int j = 0; j < kPer; ++j) {
        acc[j] += math::layernorm_dinp(d.v[k][j], x.v[k][j], w[j], s, r);
        dw.v[k][j] += d.v[k][j] * ((x.v[k][j] - s.mean) * s.rstd);
        db.v[k][j] += d.v[k][j];
      }
      store_pack(di, acc);
    }
  }
  // The warps' sums, added in warp order: warp 0 writes, each later warp adds after a barrier.
  for (int turn = 0; turn < kLayerNormRowsPerBlock; ++turn) {
    if (warp == turn) {
#pragma unroll
      for (int k = 0; k < kSlots; ++k) {
        if (!Row::has(k, lane, packs)) continue;
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
          const size_t c = Row::offset(k, lane) + j;
          block_sums[c] = turn == 0 ? dw.v[k][j] : block_sums[c] + dw.v[k][j];
          block_sums[C + c] = turn == 0 ? db.v[k][j] : block_sums[C + c] + db.v[k][j];
        }
      }
    }
    __syncthreads();
  }
  float* out = partials + static_cast<size_t>(blockIdx.x) * 2 * C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x) out[i] = block_sums[i];
}

// Calls launch(std::integral_constant<int, kSlots>{}) with the fewest slots (of a few sizes, so
// that few variants compile) that hold a row of C elements, if the row path takes C (at most
// kMaxFloatsPerLane per lane) and `pointers`.
template <class T, int kMaxFloatsPerLane, class Launch>
bool with_row_slots(int C, std::initializer_list<const void*> pointers, Launch&& launch) {
  constexpr int kPer = Pack<T>::kCount;
  constexpr int kMaxSlots = kMaxFloatsPerLane / kPer;
  if (C % kPer != 0 || C > kMaxSlots * kPer * kWarp) return false;
  for (const void* p : pointers) {
    if (!aligned16(p)) return false;
  }
  const int slots = (C / kPer + kWarp - 1) / kWarp;
  auto fits = [&](auto k) {
    if constexpr (decltype(k)::value <= kMaxSlots) {
      if (slots > decltype(k)::value) return false;
      launch(k);
      return true;
    } else {
      return false;
    }
  };
  using std::integral_constant;
  return fits(integral_constant<int, 1>{}) || fits(integral_constant<int, 2>{}) || fits(integral_constant<int, 3>{}) ||
         fits(integral_constant<int, 4>{}) || fits(integral_constant<int, 6>{}) || fits(integral_constant<int, 7>{}) ||
         fits(integral_constant<int, 8>{}) || fits(integral_constant<int, 12>{}) || fits(integral_constant<int, 16>{});
}

// ---- launchers ----------------------------------------------------------------------------------

// residual = a + b, out = layernorm(residual); b == nullptr: out = layernorm(a), residual unused.
template <class T>
void residual_layernorm_forward(cudaStream_t stream, T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* weight, const T* bias, int N, int C) {
  if (N <= 0) return;
  const unsigned blocks = blocks_for(N, kLayerNormRowsPerBlock);
  constexpr unsigned kThreads = kLayerNormRowsPerBlock * kWarp;
  const std::initializer_list<const void*> pointers = {residual == nullptr ? a : residual, out, a,
                                                       b == nullptr ? a : b, weight, bias};
  const bool fused = with_row_slots<T, kRowForwardMaxFloatsPerLane>(C, pointers, [&](auto slots) {
    launch_kernel(row_layernorm_forward_kernel<T, decltype(slots)::value>, blocks, kThreads, 0, stream, residual, out,
                  mean, rstd, a, b, weight, bias, N, C);
  });
  if (fused) return;
  const T* x = a;
  if (b != nullptr) {
    residual_forward(stream, residual, a, b, static_cast<size_t>(N) * C);
    x = residual;
  }
  launch_kernel(layernorm_forward_kernel<T>, blocks, kThreads, 0, stream, out, mean, rstd, x, weight, bias, N, C);
}

template <class T>
void layernorm_forward(cudaStream_t stream, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C) {
  residual_layernorm_forward<T>(stream, nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C);
}

// Both paths sum the parameter gradients over column_groups(N) groups of rows.
inline size_t layernorm_backward_scratch_floats(int N, int C) { return column_reduce_scratch_floats(2, N, C); }

template <class T>
void layernorm_backward(cudaStream_t stream, T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C, float* scratch) {
  if (N <= 0) return;
  const int groups = column_groups(N);
  const int rows_per_group = (N + groups - 1) / groups;
  const bool one_pass = with_row_slots<T, kRowBackwardMaxFloatsPerLane>(C, {dinp, dout, inp, weight}, [&](auto slots) {
    launch_kernel(row_layernorm_backward_kernel<T, decltype(slots)::value>, groups, kLayerNormRowsPerBlock * kWarp,
                  2 * C * sizeof(float), stream, dinp, scratch, dout, inp, weight, mean, rstd, N, C, rows_per_group);
  });
  if (one_pass) {
    constexpr unsigned kThreads = 256;
    launch_kernel(column_finish_kernel<2>, blocks_for(C, kThreads), kThreads, 0, stream, ColumnOutputs<2>{{dweight, dbias}},
                  static_cast<const float*>(scratch), groups, C, 1.0f);
    return;
  }
  launch_kernel(layernorm_backward_dinp_kernel<T>, blocks_for(N, kLayerNormRowsPerBlock), kLayerNormRowsPerBlock * kWarp, 0, stream, dinp, dout, inp, weight, mean, rstd, N, C);
  column_reduce<2>(stream, {{dweight, dbias}}, scratch, N, C, 1.0f,
                   LayerNormParamGradValues<T>{dout, inp, mean, rstd, C});
}

}  // namespace xtrain::cuda
