// CudaBackend: memory, and every operation except the embedding's (cuda/embedding.cu, kept apart
// because CUB's radix sort is the slowest code to compile). Each operation is a launcher from
// cuda/kernels/*.cuh or a product through GemmEngine, all on stream_.
#include "cuda/cuda_backend.hpp"

#include <new>
#include <string>

#include "cuda/check.hpp"
#include "cuda/kernels/adamw.cuh"
#include "cuda/kernels/attention.cuh"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/cross_entropy.cuh"
#include "cuda/kernels/elementwise.cuh"
#include "cuda/kernels/layernorm.cuh"
#include "cuda/kernels/sum_squares.cuh"

namespace xtrain::cuda {
namespace {

cudaStream_t select_device_and_create_stream(int device) {
  XTRAIN_CUDA_CHECK(cudaSetDevice(device));
  cudaStream_t stream = nullptr;
  XTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// std::bad_alloc as the interface asks, with the sizes in its message.
class DeviceOutOfMemory : public std::bad_alloc {
 public:
  explicit DeviceOutOfMemory(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

[[noreturn]] void throw_out_of_memory(size_t bytes, int device, cudaError_t err) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaMemGetInfo(&free_bytes, &total_bytes);
  constexpr double kMiB = 1024.0 * 1024.0;
  throw DeviceOutOfMemory("cudaMalloc of " + std::to_string(bytes / kMiB) + " MiB on GPU " + std::to_string(device) +
                          " failed (" + cudaGetErrorString(err) + "); " + std::to_string(free_bytes / kMiB) +
                          " MiB free of " + std::to_string(total_bytes / kMiB));
}

}  // namespace

// ---- ScratchBuffer ------------------------------------------------------------------------------

ScratchBuffer::~ScratchBuffer() { cudaFree(data_); }

void* ScratchBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return data_;
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // earlier work may still use the old buffer
  XTRAIN_CUDA_CHECK(cudaFree(data_));
  data_ = nullptr;
  bytes_ = 0;
  XTRAIN_CUDA_CHECK(cudaMalloc(&data_, bytes));
  bytes_ = bytes;
  return data_;
}

// ---- memory -------------------------------------------------------------------------------------

CudaBackend::CudaBackend(int device, bool tf32)
    : device_(device), stream_(select_device_and_create_stream(device)), gemm_(stream_, tf32), scratch_(stream_) {
  XTRAIN_CUDA_CHECK(cudaMalloc(&sum_partials_, (kSumSquaresBlocks + 1) * sizeof(double)));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  cudaFree(sum_partials_);
  cudaStreamDestroy(stream_);
}

void* CudaBackend::alloc_zeroed(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes == 0 ? 1 : bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next launch check does not report it again
    throw_out_of_memory(bytes, device_, err);
  }
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));  // zeroed before any other stream sees it
  return p;
}

float* CudaBackend::alloc_floats(size_t n) { return static_cast<float*>(alloc_zeroed(n * sizeof(float))); }
int32_t* CudaBackend::alloc_ints(size_t n) { return static_cast<int32_t*>(alloc_zeroed(n * sizeof(int32_t))); }

void CudaBackend::free(void* p) {
  if (p != nullptr) XTRAIN_CUDA_CHECK(cudaFree(p));
}

// From pageable host memory, cudaMemcpyAsync returns once the source has been staged, which is
// the interface's "host_src may be reused".
void CudaBackend::upload(float* dst, const float* host_src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice, stream_));
}
void CudaBackend::upload(int32_t* dst, const int32_t* host_src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(int32_t), cudaMemcpyHostToDevice, stream_));
}
void CudaBackend::download(float* host_dst, const float* src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::download(int32_t* host_dst, const int32_t* src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, n * sizeof(int32_t), cudaMemcpyDeviceToHost, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}
void CudaBackend::fill_zero(float* p, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_));
}
void CudaBackend::copy(float* dst, const float* src, size_t n) {
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
}
void CudaBackend::synchronize() { XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// ---- operations ---------------------------------------------------------------------------------

void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int N, int C) {
  cuda::layernorm_forward(stream_, out, mean, rstd, inp, weight, bias, N, C);
}

void CudaBackend::layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                     const float* weight, const float* mean, const float* rstd, int N, int C) {
  float* partials = static_cast<float*>(scratch_.reserve(layernorm_backward_scratch_floats(N, C) * sizeof(float)));
  cuda::layernorm_backward(stream_, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C, partials);
}

void CudaBackend::matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C,
                                 int OC) {
  // out (N,OC) = inp (N,C) @ weight^T (C,OC) + bias, the bias in the product's epilogue
  gemm_.run(N, OC, C, 1.0f, {inp, C, false}, {weight, C, true}, 0.0f, out, OC, 0, 1, bias);
}

void CudaBackend::matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                  const float* weight, int N, int C, int OC, float dout_scale) {
  // dinp (N,C) = s * dout (N,OC) @ weight (OC,C)
  gemm_.run(N, C, OC, dout_scale, {dout, OC, false}, {weight, C, false}, 0.0f, dinp, C);
  // dweight (OC,C) += s * dout^T (OC,N) @ inp (N,C)
  gemm_.run(OC, C, N, dout_scale, {dout, OC, true}, {inp, C, false}, 1.0f, dweight, C);
  if (dbias != nullptr) {
    float* partials = static_cast<float*>(scratch_.reserve(column_reduce_scratch_floats(1, N, OC) * sizeof(float)));
    column_reduce<1>(stream_, {{dbias}}, partials, N, OC, dout_scale, MatrixValues{dout, OC});
  }
}

size_t CudaBackend::attention_saved_floats(int B, int T, int C, int NH) const {
  return cuda::attention_saved_floats({B, T, C, NH});
}

size_t CudaBackend::attention_scratch_floats(int B, int T, int C, int NH) const {
  return cuda::attention_scratch_floats({B, T, C, NH});
}

void CudaBackend::attention_forward(float* out, float* saved, const float* qkv, float* scratch, int B, int T, int C,
                                    int NH) {
  cuda::attention_forward(stream_, gemm_, out, saved, qkv, scratch, {B, T, C, NH});
}

void CudaBackend::attention_backward(float* dqkv, const float* dout, const float* qkv, const float* /*out*/,
                                     const float* saved, float* scratch, int B, int T, int C, int NH) {
  cuda::attention_backward(stream_, gemm_, dqkv, dout, qkv, saved, scratch, {B, T, C, NH});
}

void CudaBackend::gelu_forward(float* out, const float* inp, size_t n) { cuda::gelu_forward(stream_, out, inp, n); }

void CudaBackend::gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  cuda::gelu_backward(stream_, dinp, inp, dout, n);
}

void CudaBackend::residual_forward(float* out, const float* a, const float* b, size_t n) {
  cuda::residual_forward(stream_, out, a, b, n);
}

void CudaBackend::softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, float dloss, int N,
                                        int V, int Vp) {
  cuda::softmax_cross_entropy(stream_, logits, losses, targets, dloss, N, V, Vp);
}

void CudaBackend::adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                               const AdamWHyper& h) {
  cuda::adamw_update(stream_, params, grads, m, v, n, h);
}

double CudaBackend::sum_squares(const float* x, size_t n) {
  cuda::sum_squares(stream_, sum_partials_, x, n);
  double result = 0.0;
  XTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(&result, sum_partials_ + kSumSquaresBlocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  XTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return result;
}

void CudaBackend::scale(float* x, float s, size_t n) { cuda::scale(stream_, x, s, n); }

}  // namespace xtrain::cuda
