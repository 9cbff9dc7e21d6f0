// Interpret mode: what cuBLASLt's opaque descriptors hold in the emulation, shared by the
// descriptor calls (cublaslt_descriptors.cpp) and the heuristic and product (cublaslt.cpp).
// Defaults are the documented ones.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

struct cublasLtContext {};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
  const void* aux = nullptr;  // the GELU input: written by GELU_AUX(_BIAS), read by DGELU
  int64_t aux_ld = 0;
  int32_t aux_type = -1;  // -1: D's type
};

struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;  // elements between consecutive matrices of the batch
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t max_workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // minimum alignment of A, B, C, D in bytes
};

namespace xtrain::interp {

// Records `why` as this thread's last_cublas_detail() and returns `status`.
cublasStatus_t refuse(cublasStatus_t status, const std::string& why);

}  // namespace xtrain::interp
