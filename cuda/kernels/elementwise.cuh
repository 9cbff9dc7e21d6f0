// Elementwise operations: GELU forward/backward, residual add, scale. Memory-bound: each thread
// handles 4 consecutive floats with 16-byte loads and stores when every pointer is 16-byte
// aligned (the common case: offsets into the flat buffers are multiples of C), scalar otherwise.
// Outputs may alias inputs (each element is read before it is written by the same thread).
#pragma once

#include "cuda/check.hpp"
#include "cuda/kernels/common.cuh"
#include "worker/math/gelu.hpp"

namespace xtrain::cuda {

template <int kIn>
struct Inputs {
  const float* p[kIn];
};

// out[i] = f(in_0[i], ..., in_{kIn-1}[i])
template <int kIn, class F>
__global__ void map_kernel(float* out, Inputs<kIn> in, size_t n, bool vectorised, F f) {
  const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
  if (i >= n) return;
  if (vectorised && i + 4 <= n) {
    float4 x[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = *reinterpret_cast<const float4*>(in.p[k] + i);
    float a[kIn], b[kIn], c[kIn], d[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) {
      a[k] = x[k].x;
      b[k] = x[k].y;
      c[k] = x[k].z;
      d[k] = x[k].w;
    }
    *reinterpret_cast<float4*>(out + i) = make_float4(f(a), f(b), f(c), f(d));
    return;
  }
  const size_t end = i + 4 < n ? i + 4 : n;
  for (size_t j = i; j < end; ++j) {
    float x[kIn];
#pragma unroll
    for (int k = 0; k < kIn; ++k) x[k] = in.p[k][j];
    out[j] = f(x);
  }
}

template <int kIn, class F>
void launch_map(cudaStream_t stream, float* out, Inputs<kIn> in, size_t n, F f) {
  if (n == 0) return;
  bool vectorised = aligned16(out);
  for (int k = 0; k < kIn; ++k) vectorised = vectorised && aligned16(in.p[k]);
  constexpr unsigned kThreads = 256;
  map_kernel<kIn><<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(out, in, n, vectorised, f);
  XTRAIN_LAUNCH_CHECK();
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

inline void gelu_forward(cudaStream_t stream, float* out, const float* inp, size_t n) {
  launch_map<1>(stream, out, {{inp}}, n, GeluForward{});
}
inline void gelu_backward(cudaStream_t stream, float* dinp, const float* inp, const float* dout, size_t n) {
  launch_map<2>(stream, dinp, {{inp, dout}}, n, GeluBackward{});
}
inline void residual_forward(cudaStream_t stream, float* out, const float* a, const float* b, size_t n) {
  launch_map<2>(stream, out, {{a, b}}, n, Add{});
}
inline void scale(cudaStream_t stream, float* x, float s, size_t n) { launch_map<1>(stream, x, {{x}}, n, Scale{s}); }

}  // namespace xtrain::cuda
