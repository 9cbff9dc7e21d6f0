// CudaBackend's embedding operations (the rest are in cuda_backend.cu): this file alone pulls in
// CUB's radix sort, so it compiles in parallel with the other.
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels/embedding.cuh"

namespace xtrain::cuda {

void CudaBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B,
                                    int T, int C) {
  cuda::embedding_forward(stream_, out.as<float>(), tokens, wte.as<float>(), wpe.as<float>(), B, T, C);
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B,
                                     int T, int C) {
  void* scratch = scratch_.reserve(embedding_backward_scratch_bytes(B * T));
  cuda::embedding_backward(stream_, dwte, dwpe, dout.as<float>(), tokens, B, T, C, scratch);
}

}  // namespace xtrain::cuda
