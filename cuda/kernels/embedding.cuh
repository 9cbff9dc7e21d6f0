// Token + position embedding, forward and a deterministic, parallel backward. Activations
// (out, dout) and the weights' copy (wte, wpe in forward) are T, float or bf16; the gradients
// dwte, dwpe are fp32 and every sum is fp32.
//
// Backward must add each position's gradient into the row of its token; several positions share
// a token, so a plain scatter would need float atomics (bits depend on scheduling). Frequent
// tokens (in GPT-2 text a few tokens fill a large share of positions) must not serialise either.
//   1. key[i] = token[i] << position_bits | i (unique keys, so any sort orders them the same);
//      cub::DeviceRadixSort sorts them (stable, deterministic): a token's positions become one
//      run of the sorted array, in position order;
//   2. the sorted array is cut into chunks of kEmbeddingChunk entries, fixed by B*T alone. One
//      thread per (chunk, channel) walks its chunk: a run that lies wholly inside the chunk is
//      added to dwte[token] there, onto the existing value in position order (as the CPU does);
//      the pieces of runs that cross a chunk boundary (at most the first and the last run of a
//      chunk) go to two partial sums per chunk;
//   3. one thread per (chunk, channel) where a crossing run starts adds that run's partials to
//      dwte[token] in chunk order.
// Every row of dwte is written by one thread per channel, in an order fixed by the tokens alone:
// deterministic, no atomics, and a token seen 10,000 times costs 10,000 / kEmbeddingChunk adds
// in pass 3 instead of 10,000 in one warp. Runs within one chunk match the CPU bit for bit;
// crossing runs differ from it by the grouping of their fp32 sum only.
// dwpe is a plain per-(t, c) sum over b, in the CPU's order. Every kernel here moves 16-byte
// packs where C is whole packs and the pointers aligned (one thread per pack of channels), one
// element at a time otherwise; the sums are the same either way.
#pragma once

#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/model/cuda_buffers.hpp"

namespace xtrain::cuda {

// One thread per kPer channels of a position: a pack of T when `vectorised` (C a multiple of a
// pack, every pointer 16-byte aligned: 16-byte loads of both rows and a 16-byte store), kPer
// single elements otherwise. Either way the same fp32 sum rounded once. Positions count from
// *first, or from 0 where first is null (a decoder's step reads its position here, on the device).
template <class T>
__global__ void embedding_forward_kernel(T* __restrict__ out, const int32_t* __restrict__ tokens,
                                         const T* __restrict__ wte, const T* __restrict__ wpe,
                                         const int32_t* __restrict__ first, int BT, int T_, int C, bool vectorised) {
  constexpr int kPer = Pack<T>::kCount;
  const int per_row = (C + kPer - 1) / kPer;
  const size_t idx = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<size_t>(BT) * per_row) return;
  const int c0 = static_cast<int>(idx % per_row) * kPer;
  const int bt = static_cast<int>(idx / per_row);
  const T* e = wte + static_cast<size_t>(tokens[bt]) * C;
  const T* q = wpe + static_cast<size_t>(bt % T_ + (first != nullptr ? *first : 0)) * C;
  T* o = out + static_cast<size_t>(bt) * C;
  if (vectorised) {
    float x[kPer], y[kPer];
    load_pack(e + c0, x);
    load_pack(q + c0, y);
#pragma unroll
    for (int j = 0; j < kPer; ++j) x[j] += y[j];
    store_pack(o + c0, x);
    return;
  }
  for (int c = c0; c < min(C, c0 + kPer); ++c) o[c] = store_as<T>(load_f32(e[c]) + load_f32(q[c]));
}

// dwpe[t, c] += dout[0, t, c], then dout[1, t, c], ...: one thread per kPer consecutive (t, c),
// by packs when every pointer is 16-byte aligned (T C a multiple of a pack keeps each b's slice
// aligned), element by element otherwise and in the tail.
template <class T>
__global__ void position_grad_kernel(float* __restrict__ dwpe, const T* __restrict__ dout, int B, int T_, int C,
                                     bool vectorised) {
  constexpr int kPer = Pack<T>::kCount;
  const size_t n = static_cast<size_t>(T_) * C;
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (i >= n) return;
  if (vectorised && i + kPer <= n) {
    float acc[kPer];
    load_floats(dwpe + i, acc);
    for (int b = 0; b < B; ++b) {
      float d[kPer];
      load_pack(dout + static_cast<size_t>(b) * n + i, d);
#pragma unroll
      for (int j = 0; j < kPer; ++j) acc[j] += d[j];
    }
    store_floats(dwpe + i, acc);
    return;
  }
  const size_t end = i + kPer < n ? i + kPer : n;
  for (size_t j = i; j < end; ++j) {
    float acc = dwpe[j];
    for (int b = 0; b < B; ++b) acc += load_f32(dout[static_cast<size_t>(b) * n + j]);
    dwpe[j] = acc;
  }
}

__global__ void token_keys_kernel(unsigned long long* __restrict__ keys, const int32_t* __restrict__ tokens, int BT,
                                  int position_bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= BT) return;
  keys[i] = (static_cast<unsigned long long>(tokens[i]) << position_bits) | static_cast<unsigned long long>(i);
}

using cuda_buffers::kEmbeddingChunk;     // sorted entries per chunk (worker/model/cuda_buffers.hpp)
constexpr int kEmbeddingChannels = 128;  // channels (threads) per block

// The sorted array of keys, read as (token, position) pairs.
struct SortedTokens {
  const unsigned long long* keys;
  int n;
  int position_bits;
  __device__ unsigned long long token(int i) const { return keys[i] >> position_bits; }
  __device__ size_t position(int i) const { return keys[i] & ((1ull << position_bits) - 1); }
  // Does the run of entry i's token continue before i / after i?
  __device__ bool continues_before(int i) const { return i > 0 && token(i - 1) == token(i); }
  __device__ bool continues_after(int i) const { return i + 1 < n && token(i + 1) == token(i); }
};

// Pass 2. partials: (chunks, 2, C), slot 0 for the chunk's first run, slot 1 for its last. A
// thread takes kVec adjacent channels (16-byte accesses when kVec > 1); each channel's sums are
// the same either way.
template <class T, int kVec>
__global__ void token_grad_chunks_kernel(float* __restrict__ dwte, float* __restrict__ partials,
                                         const T* __restrict__ dout, SortedTokens s, int C) {
  const int chunk = blockIdx.x;
  const int c = (blockIdx.y * kEmbeddingChannels + threadIdx.x) * kVec;
  if (c >= C) return;
  const int begin = chunk * kEmbeddingChunk;
  const int end = min(s.n, begin + kEmbeddingChunk);
  for (int i = begin; i < end;) {
    int j = i + 1;
    while (j < end && s.token(j) == s.token(i)) ++j;  // the run's piece in this chunk: [i, j)
    const bool crosses = (i == begin && s.continues_before(i)) || (j == end && s.continues_after(j - 1));
    float* row = dwte + s.token(i) * C + c;
    float acc[kVec] = {};
    if (!crosses) load_values<kVec>(row, acc);
    for (int k = i; k < j; ++k) {
      float d[kVec];
      load_values<kVec>(dout + s.position(k) * C + c, d);
#pragma unroll
      for (int v = 0; v < kVec; ++v) acc[v] += d[v];
    }
    store_values<kVec>(crosses ? partials + (static_cast<size_t>(chunk) * 2 + (i == begin ? 0 : 1)) * C + c : row,
                       acc);
    i = j;
  }
}

// Pass 3: the chunk where a crossing run starts adds the run's pieces, in chunk order.
template <int kVec>
__global__ void token_grad_runs_kernel(float* __restrict__ dwte, const float* __restrict__ partials, SortedTokens s,
                                       int C) {
  const int chunk = blockIdx.x;
  const int c = (blockIdx.y * kEmbeddingChannels + threadIdx.x) * kVec;
  if (c >= C) return;
  const int begin = chunk * kEmbeddingChunk;
  const int last = min(s.n, begin + kEmbeddingChunk) - 1;
  if (!s.continues_after(last)) return;  // the chunk's last run ends here
  int start = last;
  while (start > begin && s.token(start - 1) == s.token(last)) --start;
  if (start == begin && s.continues_before(begin)) return;  // the run started in an earlier chunk
  float* row = dwte + s.token(last) * C + c;
  float acc[kVec], piece[kVec];
  load_values<kVec>(row, acc);
  load_values<kVec>(partials + (static_cast<size_t>(chunk) * 2 + (start == begin ? 0 : 1)) * C + c, piece);
#pragma unroll
  for (int v = 0; v < kVec; ++v) acc[v] += piece[v];
  for (int k = chunk + 1;; ++k) {  // each later chunk's first piece, while the run goes on
    load_values<kVec>(partials + static_cast<size_t>(k) * 2 * C + c, piece);
#pragma unroll
    for (int v = 0; v < kVec; ++v) acc[v] += piece[v];
    const int k_last = min(s.n, (k + 1) * kEmbeddingChunk) - 1;
    if (s.token(k_last) != s.token(last) || !s.continues_after(k_last)) break;
  }
  store_values<kVec>(row, acc);
}

inline int bits_for(unsigned long long values) {  // bits to hold 0 .. values-1
  int bits = 0;
  while ((1ull << bits) < values) ++bits;
  return bits;
}

template <class T>
void embedding_forward(cudaStream_t stream, T* out, const int32_t* tokens, const T* wte, const T* wpe,
                       const int32_t* first, int B, int T_, int C) {
  const size_t n = static_cast<size_t>(B) * T_ * C;
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  constexpr int kPer = Pack<T>::kCount;
  const bool vectorised = C % kPer == 0 && aligned16(out) && aligned16(wte) && aligned16(wpe);
  const size_t threads = static_cast<size_t>(B) * T_ * ((C + kPer - 1) / kPer);
  launch_kernel(embedding_forward_kernel<T>, blocks_for(threads, kThreads), kThreads, 0, stream, out, tokens, wte, wpe,
                first, B * T_, T_, C, vectorised);
}

// Tokens are non-negative int32: 31 bits. (The interface does not pass the vocabulary size;
// the radix sort then makes a pass or two more than strictly needed, microseconds.)
constexpr int kTokenBits = 31;

inline int embedding_chunks(int BT) { return (BT + kEmbeddingChunk - 1) / kEmbeddingChunk; }

inline int embedding_sort_end_bit(int BT) { return bits_for(static_cast<unsigned long long>(BT)) + kTokenBits; }

// What cub::DeviceRadixSort asks for to sort the BT keys (a query: nothing runs).
inline size_t embedding_sort_bytes(int BT) {
  size_t bytes = 0;
  XTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, bytes, static_cast<unsigned long long*>(nullptr),
                                                   static_cast<unsigned long long*>(nullptr), BT, 0,
                                                   embedding_sort_end_bit(BT), cudaStream_t{}));
  return bytes;
}

// `scratch` is laid out by cuda_buffers::EmbeddingScratch::of(B*T, C, sort_bytes) (the keys, the
// sorted keys, the partial sums (chunks, 2, C), then CUB's temporary storage), 256-byte aligned,
// with sort_bytes >= embedding_sort_bytes(B*T).
template <class T>
void embedding_backward(cudaStream_t stream, float* dwte, float* dwpe, const T* dout, const int32_t* tokens, int B,
                        int T_, int C, void* scratch, size_t sort_bytes) {
  const int BT = B * T_;
  if (BT == 0) return;
  constexpr unsigned kThreads = 256;
  const size_t tc = static_cast<size_t>(T_) * C;
  constexpr size_t kPer = Pack<T>::kCount;
  const bool vectorised = tc % kPer == 0 && aligned16(dwpe) && aligned16(dout);
  launch_kernel(position_grad_kernel<T>, blocks_for((tc + kPer - 1) / kPer, kThreads), kThreads, 0, stream, dwpe, dout,
                B, T_, C, vectorised);

  const int position_bits = bits_for(static_cast<unsigned long long>(BT));
  const cuda_buffers::EmbeddingScratch layout = cuda_buffers::EmbeddingScratch::of(BT, C, sort_bytes);
  char* base = static_cast<char*>(scratch);
  auto* keys = reinterpret_cast<unsigned long long*>(base + layout.keys);
  auto* sorted = reinterpret_cast<unsigned long long*>(base + layout.sorted);
  auto* partials = reinterpret_cast<float*>(base + layout.partials);
  size_t temp_bytes = layout.sort_bytes;
  launch_kernel(token_keys_kernel, blocks_for(BT, kThreads), kThreads, 0, stream, keys, tokens, BT, position_bits);
  XTRAIN_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(base + layout.sort, temp_bytes, keys, sorted, BT, 0,
                                                   embedding_sort_end_bit(BT), stream));

  const SortedTokens s{sorted, BT, position_bits};
  auto token_grad = [&](auto vec) {
    constexpr int kVec = decltype(vec)::value;
    const dim3 grid(static_cast<unsigned>(embedding_chunks(BT)), blocks_for(C, kEmbeddingChannels * kVec));
    launch_kernel(token_grad_chunks_kernel<T, kVec>, grid, kEmbeddingChannels, 0, stream, dwte, partials, dout, s, C);
    launch_kernel(token_grad_runs_kernel<kVec>, grid, kEmbeddingChannels, 0, stream, dwte, partials, s, C);
  };
  // The partials' rows are aligned with dwte's when C is whole packs (the scratch is 256-aligned).
  if (C % kPer == 0 && aligned16(dwte) && aligned16(dout)) {
    token_grad(std::integral_constant<int, static_cast<int>(kPer)>{});
  } else {
    token_grad(std::integral_constant<int, 1>{});
  }
}

}  // namespace xtrain::cuda
