// Interpret mode: the arithmetic of one validated cublasLtMatmul, on the CPU. cublaslt.cpp checks
// the call (types, shapes, pointers) and enqueues run_product on the stream with a Product
// captured by value; nothing here validates again.
#pragma once

#include <cstdint>

#include "library_types.h"

namespace xtrain::interp::lt {

// How one column-major operand is stored (before any transpose): element (i, j) of batch b is
// at b * stride + j * ld + i, in elements of `type` (CUDA_R_32F or CUDA_R_16BF).
struct Layout {
  cudaDataType_t type = CUDA_R_32F;
  int64_t rows = 0, cols = 0, ld = 0, stride = 0;
};

// What the epilogue does with x = alpha * op(A) op(B) + beta * C (+ bias), all in fp32:
// kGeluAux stores x to aux (rounded to D's type) and D = gelu(x); kDGelu reads the GELU input g
// from aux and D = x * gelu'(g). GELU is the tanh approximation (worker/math/gelu.hpp).
enum class Epilogue { kNone, kGeluAux, kDGelu };

// For each of `batch` matrices: D (m,n) = epilogue(alpha * op(A) (m,k) op(B) (k,n) + beta * C (m,n)
// (+ bias (m) on every column)), accumulated in fp32 and rounded once to D's type.
struct Product {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;      // not read when beta == 0
  void* d = nullptr;
  Layout A, B, C, D;
  bool transA = false, transB = false;
  bool tf32 = false;            // CUBLAS_COMPUTE_32F_FAST_TF32: A and B rounded to TF32 first
  int64_t m = 0, n = 0, k = 0;
  int batch = 1;
  float alpha = 1.0f, beta = 0.0f;
  const void* bias = nullptr;   // m elements of D's type, or null (no bias epilogue)
  Epilogue epilogue = Epilogue::kNone;
  void* aux = nullptr;          // (m,n) of D's type, leading dimension aux_ld; batch 1 only
  int64_t aux_ld = 0;
  // BGRADB: n elements of D's type, bgrad[j] = sum over k of op(B) (l, j), added in fp32 in order
  // of l from op(B) as stored (batch 1, alpha 1 and no TF32 rounding: cublaslt.cpp refuses others).
  void* bgrad = nullptr;
};

// fp32 rounded to TF32 (10 explicit mantissa bits), round to nearest, ties to even.
float round_to_tf32(float x);

void run_product(const Product& p);

}  // namespace xtrain::interp::lt
