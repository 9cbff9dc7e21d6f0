// CudaBackend's embedding operations (the rest are in cuda_backend.cu): this file alone pulls in
// CUB's radix sort, so it compiles in parallel with the other.
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels/embedding.cuh"

namespace xtrain::cuda {

void CudaBackend::embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                                    int T, int C) {
  cuda::embedding_forward(stream_, out, tokens, wte, wpe, B, T, C);
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                                     int T, int C) {
  void* scratch = scratch_.reserve(embedding_backward_scratch_bytes(B * T));
  cuda::embedding_backward(stream_, dwte, dwpe, dout, tokens, B, T, C, scratch);
}

}  // namespace xtrain::cuda
