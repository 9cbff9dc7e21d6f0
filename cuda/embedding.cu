// CudaBackend's embedding operations and the sizing of its scratch (the rest is in
// cuda_backend.cu): this file alone pulls in CUB's radix sort, so it compiles in parallel with
// the other. The sizes are worker/model/cuda_buffers.hpp's, which the memory plan counts.
#include <algorithm>

#include "cuda/cuda_backend.hpp"
#include "cuda/kernels/column_reduce.cuh"
#include "cuda/kernels/embedding.cuh"

namespace xtrain::cuda {

void CudaBackend::embedding_forward(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe, int B,
                                     int T, int C) {
  embedding_forward_at(out, tokens, wte, wpe, nullptr, B, T, C);
}

void CudaBackend::embedding_forward_at(ActPtr out, const int32_t* tokens, ConstActPtr wte, ConstActPtr wpe,
                                        const int32_t* first, int B, int T, int C) {
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    cuda::embedding_forward(stream_, out.as<S>(), tokens, wte.as<S>(), wpe.as<S>(), first, B, T, C);
  });
}

void CudaBackend::embedding_backward(float* dwte, float* dwpe, ConstActPtr dout, const int32_t* tokens, int B,
                                     int T, int C) {
  const size_t sort_bytes = embedding_sort_reserve(B * T);
  void* scratch = reserve_scratch_bytes(cuda_buffers::EmbeddingScratch::of(B * T, C, sort_bytes).total);
  with_storage(act_dtype(), [&](auto type) {
    using S = decltype(type);
    cuda::embedding_backward(stream_, dwte, dwpe, dout.as<S>(), tokens, B, T, C, scratch, sort_bytes);
  });
}

// The memory plan's allowance for the radix sort, or what CUB asks for if that is more (then the
// plan undercounts, and the [gpu] test of the plan says so). The reserved shape's answer is kept,
// so that a recorded backward asks CUB nothing.
size_t CudaBackend::embedding_sort_reserve(int BT) const {
  if (BT == sort_reserve_.rows) return sort_reserve_.bytes;
  return std::max(cuda_buffers::embedding_sort_allowance_bytes(BT), embedding_sort_bytes(BT));
}

Backend::OwnMemory CudaBackend::own_memory(int rows, int cols) const {
  return {.workspace_bytes = cuda_buffers::kGemmWorkspaceBytes,
          .partials_bytes = cuda_buffers::kSumSquaresPartialsBytes,
          .scratch_bytes = cuda_buffers::scratch_bytes(rows, cols, embedding_sort_reserve(rows))};
}

void CudaBackend::reserve_scratch(int rows, int cols) {
  sort_reserve_ = {rows, embedding_sort_reserve(rows)};
  reserve_scratch_bytes(cuda_buffers::scratch_bytes(rows, cols, sort_reserve_.bytes));
}

}  // namespace xtrain::cuda
