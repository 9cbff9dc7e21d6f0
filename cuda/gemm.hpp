// Row-major matrix products on one stream through cuBLASLt, with the bias add and the GELU fused
// into the product's epilogue: forward's out = inp @ W^T + b is one pass over `out` (BIAS), the
// MLP's gelu(inp @ W^T + b) one pass that also keeps the pre-activation (GELU_AUX_BIAS), and its
// backward's (dout @ W) * gelu'(pre) one pass (DGELU).
//
// Types: A and B are both fp32 or both bf16; C (= D) is fp32 or bf16 (bf16 x bf16 into fp32 is
// how parameter gradients accumulate in fp32). bf16 operands always accumulate in fp32
// (CUBLAS_COMPUTE_32F) on tensor cores. fp32 operands use TF32 tensor cores when the engine is
// made with tf32 (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to 10 mantissa bits, fp32
// accumulation), strict fp32 otherwise. The bias has C's type (cuBLASLt's rule for the BIAS
// epilogue) and must be 16-byte aligned; the caller broadcasts an unaligned bias into C instead.
// The GELU input (aux) has C's type and layout; cuBLASLt wants its leading dimension a multiple
// of 8, and it is taken 16-byte aligned like the bias. GELU is applied to the fp32 sum (product +
// beta * C + bias) before any rounding: D and aux are each rounded once, from the same value.
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

// What the epilogue does with x = alpha * op(A) op(B) + beta * C + bias, in fp32.
enum class GemmGelu {
  kNone,
  kForward,   // aux = x, C = gelu(x) (CUBLASLT_EPILOGUE_GELU_AUX, _GELU_AUX_BIAS with a bias)
  kBackward,  // C = x * gelu'(aux), aux read (CUBLASLT_EPILOGUE_DGELU; no bias then)
};
struct GemmEpilogue {
  const void* bias = nullptr;  // (N) of C's type added to every row, or null; 16-byte aligned
  GemmGelu gelu = GemmGelu::kNone;
  const void* aux = nullptr;   // with a GELU: (M,N) of C's type, row stride ldc; written by kForward
  // (M) of C's type, 16-byte aligned, or null: WRITES bias_grad[m] = sum_k op(A)[m,k], the bias
  // gradient when op(A) is dout^T (cuBLASLt's BGRADB: row-major A is its B). Only with alpha == 1
  // and bf16 operands (what NVIDIA leaves undocumented, alpha's part and TF32's, is not relied on),
  // and no bias or GELU.
  void* bias_grad = nullptr;
};

class GemmEngine {
 public:
  GemmEngine(cudaStream_t stream, bool tf32);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  bool tf32() const { return tf32_; }

  // For each of `batch` matrices: C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C,
  // with the epilogue applied (a bias and the GELUs need batch == 1 and 16-byte aligned vectors,
  // the GELUs ldc % 8 == 0: std::invalid_argument otherwise). C, the bias and aux are c_type.
  // Returns true once issued; false, issuing nothing, only for a bias gradient that cuBLASLt has
  // no algorithm for at this shape (found once, kept like any plan): the caller sums it itself.
  bool run(int M, int N, int K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta, void* C,
           int ldc, long long strideC = 0, int batch = 1, const GemmEpilogue& epilogue = {},
           cudaDataType_t c_type = CUDA_R_32F);

 private:
  // Everything that selects a cuBLASLt algorithm, including how far each pointer is aligned
  // (the heuristic assumes 256-byte alignment unless told otherwise).
  struct PlanKey {
    int M, N, K, lda, ldb, ldc;
    bool transA, transB, bias, bias_grad;
    GemmGelu gelu;
    long long strideA, strideB, strideC;
    int batch;
    cudaDataType_t typeAB, typeC;
    unsigned alignA, alignB, alignC, alignBias, alignAux;
    auto tie() const {
      return std::tie(M, N, K, lda, ldb, ldc, transA, transB, bias, bias_grad, gelu, strideA, strideB, strideC, batch,
                      typeAB, typeC, alignA, alignB, alignC, alignBias, alignAux);
    }
    bool operator<(const PlanKey& o) const { return tie() < o.tie(); }
  };
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, out = nullptr;
    cublasLtMatmulAlgo_t algo{};
    bool usable = true;  // false: no algorithm for this bias-gradient product (descriptors freed)
  };

  // The plan of `key`, found with the epilogue's pointers (of the key's alignments) already set,
  // since the heuristic reads the bias and aux pointers for their alignment.
  const Plan& plan_for(const PlanKey& key, const GemmEpilogue& epilogue);
  // Points a plan's descriptor at this call's bias and aux (a cached plan holds an earlier call's).
  static void set_epilogue_pointers(const Plan& plan, const PlanKey& key, const GemmEpilogue& epilogue);

  cudaStream_t stream_;
  bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;  // one device buffer for every product, allocated once
  size_t workspace_bytes_ = 0;
  std::map<PlanKey, Plan> plans_;
};

}  // namespace xtrain::cuda
