// Row-major matrix products on one stream through cuBLASLt, with the bias add fused into the
// product (cuBLASLt's BIAS epilogue) so forward's out = inp @ W^T + b is one pass over `out`.
//
// Types: A and B are both fp32 or both bf16; C (= D) is fp32 or bf16 (bf16 x bf16 into fp32 is
// how parameter gradients accumulate in fp32). bf16 operands always accumulate in fp32
// (CUBLAS_COMPUTE_32F) on tensor cores. fp32 operands use TF32 tensor cores when the engine is
// made with tf32 (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to 10 mantissa bits, fp32
// accumulation), strict fp32 otherwise. The bias has C's type (cuBLASLt's rule for the BIAS
// epilogue) and must be 16-byte aligned; the caller broadcasts an unaligned bias into C instead.
//
// cuBLASLt is deterministic for a fixed algorithm, workspace and stream; every shape gets its
// algorithm from the heuristic once and keeps it (the plan cache), so a shape always runs the
// same kernel with the same split, run after run.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <map>
#include <tuple>

namespace xtrain::cuda {

// One operand of a row-major product: `trans` means the stored matrix is the transpose of the
// operand (e.g. a weight (OC,C) used as (C,OC)). `ld` is the stored row stride in elements;
// `stride` the distance between consecutive matrices of a batch, in elements.
struct GemmOperand {
  const void* data = nullptr;
  int ld = 0;
  bool trans = false;
  long long stride = 0;
  cudaDataType_t type = CUDA_R_32F;  // CUDA_R_32F or CUDA_R_16BF
};

class GemmEngine {
 public:
  GemmEngine(cudaStream_t stream, bool tf32);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  bool tf32() const { return tf32_; }

  // For each of `batch` matrices: C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C,
  // then + bias[n] on every row when bias is given (batch must be 1 then, and the bias 16-byte
  // aligned: std::invalid_argument otherwise). C and the bias are of type c_type.
  void run(int M, int N, int K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta, void* C,
           int ldc, long long strideC = 0, int batch = 1, const void* bias = nullptr,
           cudaDataType_t c_type = CUDA_R_32F);

 private:
  // Everything that selects a cuBLASLt algorithm, including how far each pointer is aligned
  // (the heuristic assumes 256-byte alignment unless told otherwise).
  struct PlanKey {
    int M, N, K, lda, ldb, ldc;
    bool transA, transB, bias;
    long long strideA, strideB, strideC;
    int batch;
    cudaDataType_t typeAB, typeC;
    unsigned alignA, alignB, alignC, alignBias;
    auto tie() const {
      return std::tie(M, N, K, lda, ldb, ldc, transA, transB, bias, strideA, strideB, strideC, batch, typeAB, typeC,
                      alignA, alignB, alignC, alignBias);
    }
    bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };

  // The plan of `key`, found with `bias` (of the key's alignment) already set, since the
  // heuristic reads the bias pointer for its alignment.
  const Plan& plan_for(const PlanKey& key, const void* bias);

  cudaStream_t stream_;
  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;  // one device buffer for every product, allocated once
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace xtrain::cuda
