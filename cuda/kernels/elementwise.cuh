// Elementwise operations: GELU forward/backward, residual add, scale, conversion of fp32 to the
// activation type, and a bias broadcast. Memory-bound: each thread handles 16 bytes (4 floats or
// 8 bf16) with one vector load per input and one store when every pointer is 16-byte aligned
// (the common case: offsets into the flat buffers are multiples of C), element by element
// otherwise. Outputs may alias inputs (each element is read before it is written by the same
// thread). Arithmetic in fp32; the result stored as T (store_as: bf16 rounds once).
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/gelu.hpp"

namespace xtrain::cuda {

template <class T, int kIn>
struct Inputs {
  const T* p[kIn];
};

// out[i] = f(in_0[i], ..., in_{kIn-1}[i])
template <class T, int kIn, class F>
__global__ void map_kernel(T* out, Inputs<T, kIn> in, size_t n, bool vectorised, F f) {
  constexpr int kPer = Pack<T>::kCount;
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (i >= n) return;
  if (vectorised && i + kPer <= n) {
    Pack<T> x[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = *reinterpret_cast<const Pack<T>*>(in.p[k] + i);
    Pack<T> y;
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      float a[kIn];
#pragma unroll
      for (int k = 0; k < kIn; ++k) a[k] = load_f32(x[k].v[j]);
      y.v[j] = store_as<T>(f(a));
    }
    *reinterpret_cast<Pack<T>*>(out + i) = y;
    return;
  }
  const size_t end = i + kPer < n ? i + kPer : n;
  for (size_t j = i; j < end; ++j) {
    float a[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) a[k] = load_f32(in.p[k][j]);
    out[j] = store_as<T>(f(a));
  }
}

template <class T, int kIn, class F>
void launch_map(cudaStream_t stream, T* out, Inputs<T, kIn> in, size_t n, F f) {
  if (n == 0) return;
  bool vectorised = aligned16(out);
  for (int k = 0; k < kIn; ++k) vectorised = vectorised && aligned16(in.p[k]);
  constexpr unsigned kThreads = 256;
  constexpr size_t kPer = Pack<T>::kCount;
  launch_kernel(map_kernel<T, kIn, F>, blocks_for((n + kPer - 1) / kPer, kThreads), kThreads, 0, stream, out, in, n, vectorised, f);
}

struct GeluForward {
  __device__ float operator()(const float (&x)[1]) const { return math::gelu(x[0]); }
};
struct GeluBackward {  // inputs: (inp, dout)
  __device__ float operator()(const float (&x)[2]) const { return math::gelu_grad(x[0]) * x[1]; }
};
struct Add {
  __device__ float operator()(const float (&x)[2]) const { return x[0] + x[1]; }
};
struct Scale {
  float s;
  __device__ float operator()(const float (&x)[1]) const { return x[0] * s; }
};

template <class T>
void gelu_forward(cudaStream_t stream, T* out, const T* inp, size_t n) {
  launch_map<T, 1>(stream, out, {{inp}}, n, GeluForward{});
}
template <class T>
void gelu_backward(cudaStream_t stream, T* dinp, const T* inp, const T* dout, size_t n) {
  launch_map<T, 2>(stream, dinp, {{inp, dout}}, n, GeluBackward{});
}
template <class T>
void residual_forward(cudaStream_t stream, T* out, const T* a, const T* b, size_t n) {
  launch_map<T, 2>(stream, out, {{a, b}}, n, Add{});
}
inline void scale(cudaStream_t stream, float* x, float s, size_t n) { launch_map<float, 1>(stream, x, {{x}}, n, Scale{s}); }

// dst = src stored as T (the weights' copy from the fp32 master). A thread converts one pack of
// T (8 bf16 from two float packs; 4 floats) when both pointers are 16-byte aligned, element by
// element otherwise and in the tail.
template <class T>
__global__ void convert_kernel(T* __restrict__ dst, const float* __restrict__ src, size_t n, bool vectorised) {
  constexpr int kPer = Pack<T>::kCount;
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPer;
  if (i >= n) return;
  if (vectorised && i + kPer <= n) {
    float x[kPer];
    load_floats(src + i, x);
    store_pack(dst + i, x);
    return;
  }
  const size_t end = i + kPer < n ? i + kPer : n;
  for (size_t j = i; j < end; ++j) dst[j] = store_as<T>(src[j]);
}

template <class T>
void convert(cudaStream_t stream, T* dst, const float* src, size_t n) {
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  constexpr size_t kPer = Pack<T>::kCount;
  launch_kernel(convert_kernel<T>, blocks_for((n + kPer - 1) / kPer, kThreads), kThreads, 0, stream, dst, src, n,
                aligned16(dst) && aligned16(src));
}

// out[r, c] = bias[c] for every row: a product's C operand when its bias cannot be fused.
template <class T>
__global__ void broadcast_rows_kernel(T* __restrict__ out, const T* __restrict__ bias, size_t rows, int cols) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * cols) out[i] = bias[i % cols];
}

template <class T>
void broadcast_rows(cudaStream_t stream, T* out, const T* bias, int rows, int cols) {
  const size_t n = static_cast<size_t>(rows) * cols;
  if (n == 0) return;
  constexpr unsigned kThreads = 256;
  launch_kernel(broadcast_rows_kernel<T>, blocks_for(n, kThreads), kThreads, 0, stream, out, bias, static_cast<size_t>(rows), cols);
}

}  // namespace xtrain::cuda
