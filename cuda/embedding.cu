// CudaBackend's embedding operations and the sizing of its scratch (the rest is in
// cuda_backend.cu): this file alone pulls in CUB's radix sort, so it compiles in parallel with
// the other.
#include <algorithm>

#include "cuda/cuda_backend.hpp"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/embedding.cuh"

namespace xtrain::cuda {

void CudaBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B,
                                    int T, int C) {
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    cuda::embedding_forward(stream_, out.as<S>(), tokens, wte.as<S>(), wpe.as<S>(), B, T, C);
  });
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B,
                                     int T, int C) {
  void* scratch = scratch_.reserve(embedding_backward_scratch_bytes(B * T, C));
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    cuda::embedding_backward(stream_, dwte, dwpe, dout.as<S>(), tokens, B, T, C, scratch);
  });
}

// The column sums need at most column_groups(rows) x 2 x cols floats (layernorm: 2 sums of C
// columns; bias gradients: 1 sum of up to 4C); embedding backward its sort and partial sums.
void CudaBackend::reserve_scratch(int rows, int cols) {
  const size_t column_sums = column_reduce_scratch_floats(2, rows, cols) * sizeof(float);
  scratch_.reserve(std::max(column_sums, embedding_backward_scratch_bytes(rows, cols)));
}

}  // namespace xtrain::cuda
