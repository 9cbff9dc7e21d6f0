#include "cuda/gemm.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/check.hpp"
#include "worker/model/cuda_buffers.hpp"

namespace xtrain::cuda {
namespace {

// What NVIDIA recommends for cuBLASLt on Hopper (worker/model/cuda_buffers.hpp: the memory plan counts it).
constexpr size_t kWorkspaceBytes = cuda_buffers::kGemmWorkspaceBytes;

size_t type_bytes(cudaDataType_t t) {
  if (t == CUDA_R_32F) return 4;
  if (t == CUDA_R_16BF) return 2;
  throw std::invalid_argument("GemmEngine: only fp32 and bf16 matrices");
}

// The largest power of two (up to 256) that divides the address of every matrix of the batch.
unsigned alignment_of(const void* p, long long stride, cudaDataType_t type) {
  std::uintptr_t bits = reinterpret_cast<std::uintptr_t>(p) | 256u;
  if (stride != 0) bits |= static_cast<std::uintptr_t>(stride) * type_bytes(type);
  return static_cast<unsigned>(bits & (~bits + 1));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int rows, int cols, int ld, int batch, long long stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  XTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, static_cast<uint64_t>(rows),
                                                 static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    XTRAIN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                         sizeof(batch)));
    const int64_t s = stride;
    XTRAIN_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof(s)));
  }
  return layout;
}

// The epilogue that does what `key` asks: a bias, a GELU forward keeping its input, a GELU
// gradient reading it back, or the bias gradient of the second cuBLASLt operand (our A).
cublasLtEpilogue_t epilogue_of(bool bias, bool bias_grad, GemmGelu gelu) {
  if (bias_grad) return CUBLASLT_EPILOGUE_BGRADB;
  switch (gelu) {
    case GemmGelu::kForward: return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmGelu::kBackward: return CUBLASLT_EPILOGUE_DGELU;
    case GemmGelu::kNone: break;
  }
  return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

}  // namespace

GemmEngine::GemmEngine(cudaStream_t stream, bool tf32) : stream_(stream), tf32_(tf32) {
  XTRAIN_CUBLAS_CHECK(cublasLtCreate(&handle_));
  XTRAIN_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

GemmEngine::~GemmEngine() {
  for (auto& [key, plan] : plans_) {
    if (!plan.usable) continue;
    cublasLtMatrixLayoutDestroy(plan.first);
    cublasLtMatrixLayoutDestroy(plan.second);
    cublasLtMatrixLayoutDestroy(plan.out);
    cublasLtMatmulDescDestroy(plan.desc);
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// cuBLASLt is column-major. A row-major (R,C) matrix is the column-major (C,R) one with the same
// stride, so row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the product is
// issued with B first, A second, and m = N, n = M.
void GemmEngine::set_epilogue_pointers(const Plan& plan, const PlanKey& k, const GemmEpilogue& e) {
  if (k.bias) {
    XTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof(e.bias)));
  }
  if (k.bias_grad) {
    XTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias_grad,
                                                       sizeof(e.bias_grad)));
  }
  if (k.gelu != GemmGelu::kNone) {
    XTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof(e.aux)));
  }
}

const GemmEngine::Plan& GemmEngine::plan_for(const PlanKey& k, const GemmEpilogue& epilogue) {
  auto found = plans_.find(k);
  if (found != plans_.end()) return found->second;

  Plan plan;
  const bool fast_tf32 = tf32_ && k.typeAB == CUDA_R_32F;
  const cublasComputeType_t compute = fast_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, compute, CUDA_R_32F));
  const cublasOperation_t op_first = k.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = k.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  XTRAIN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof(op_first)));
  XTRAIN_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof(op_second)));
  const cublasLtEpilogue_t epilogue_kind = epilogue_of(k.bias, k.bias_grad, k.gelu);
  if (epilogue_kind != CUBLASLT_EPILOGUE_DEFAULT) {
    XTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue_kind,
                                                       sizeof(epilogue_kind)));
  }
  if (k.bias || k.bias_grad) {
    const cudaDataType_t bias_type = k.typeC;
    XTRAIN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                                       sizeof(bias_type)));
  }
  // The GELU input is C's shape and type (the default aux type, D's, left unset): the same ld.
  if (k.gelu != GemmGelu::kNone) {
    const int64_t aux_ld = k.ldc;
    XTRAIN_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  set_epilogue_pointers(plan, k, epilogue);
  // Column-major shapes as stored (before the op): first is op(B)^T's source, second op(A)^T's.
  const cudaDataType_t ab = k.typeAB;
  plan.first = k.transB ? make_layout(ab, k.K, k.N, k.ldb, k.batch, k.strideB)   // B stored (N,K) row-major
                        : make_layout(ab, k.N, k.K, k.ldb, k.batch, k.strideB);  // B stored (K,N) row-major
  plan.second = k.transA ? make_layout(ab, k.M, k.K, k.lda, k.batch, k.strideA)  // A stored (K,M) row-major
                         : make_layout(ab, k.K, k.M, k.lda, k.batch, k.strideA); // A stored (M,K) row-major
  plan.out = make_layout(k.typeC, k.N, k.M, k.ldc, k.batch, k.strideC);

  cublasLtMatmulPreference_t pref = nullptr;
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_)));
  const uint32_t align_first = k.alignB, align_second = k.alignA, align_out = k.alignC;
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           &align_first, sizeof(align_first)));
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           &align_second, sizeof(align_second)));
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                           &align_out, sizeof(align_out)));
  XTRAIN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                           &align_out, sizeof(align_out)));
  cublasLtMatmulHeuristicResult_t result{};
  int found_count = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.first, plan.second, plan.out,
                                                               plan.out, pref, 1, &result, &found_count);
  cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found_count == 0) {
    cublasLtMatrixLayoutDestroy(plan.first);
    cublasLtMatrixLayoutDestroy(plan.second);
    cublasLtMatrixLayoutDestroy(plan.out);
    cublasLtMatmulDescDestroy(plan.desc);
    // A bias gradient has a fallback (the caller's column sums): remember that this shape has none.
    if (k.bias_grad) return plans_.emplace(k, Plan{nullptr, nullptr, nullptr, nullptr, {}, false}).first->second;
    throw std::runtime_error("cuBLASLt has no algorithm for the product (" + std::to_string(k.M) + "," +
                             std::to_string(k.K) + ")x(" + std::to_string(k.K) + "," + std::to_string(k.N) +
                             "), batch " + std::to_string(k.batch) + (k.bias ? " with bias" : "") +
                             (k.gelu == GemmGelu::kForward    ? " with GELU"
                              : k.gelu == GemmGelu::kBackward ? " with the GELU gradient"
                                                              : "") +
                             ": " +
                             cublasLtGetStatusString(status));
  }
  plan.algo = result.algo;
  return plans_.emplace(k, plan).first->second;
}

bool GemmEngine::run(int M, int N, int K, float alpha, const GemmOperand& A, const GemmOperand& B, float beta,
                     void* C, int ldc, long long strideC, int batch, const GemmEpilogue& epilogue,
                     cudaDataType_t c_type) {
  const void* bias = epilogue.bias;
  const bool gelu = epilogue.gelu != GemmGelu::kNone;
  if ((bias != nullptr || gelu) && batch != 1) {
    throw std::invalid_argument("GemmEngine::run: a bias or GELU epilogue needs batch == 1");
  }
  if (bias != nullptr && alignment_of(bias, 0, c_type) < 16) {
    throw std::invalid_argument("GemmEngine::run: the fused bias must be 16-byte aligned");
  }
  if (bias != nullptr && epilogue.gelu == GemmGelu::kBackward) {
    throw std::invalid_argument("GemmEngine::run: the GELU gradient epilogue takes no bias");
  }
  if (gelu && (epilogue.aux == nullptr || alignment_of(epilogue.aux, 0, c_type) < 16)) {
    throw std::invalid_argument("GemmEngine::run: the GELU epilogue's input (aux) must be given, 16-byte aligned");
  }
  if (gelu && ldc % 8 != 0) {
    throw std::invalid_argument("GemmEngine::run: a GELU epilogue needs ldc (" + std::to_string(ldc) +
                                ") to be a multiple of 8 (cuBLASLt's rule for the aux leading dimension)");
  }
  if (epilogue.bias_grad != nullptr &&
      (bias != nullptr || gelu || batch != 1 || alpha != 1.0f || A.type != CUDA_R_16BF ||
       alignment_of(epilogue.bias_grad, 0, c_type) < 16)) {
    throw std::invalid_argument(
        "GemmEngine::run: a bias gradient needs alpha 1, bf16 operands, batch 1, no bias or GELU, 16-byte alignment");
  }
  if (A.type != B.type) throw std::invalid_argument("GemmEngine::run: A and B must have the same type");
  PlanKey key{};
  key.M = M;
  key.N = N;
  key.K = K;
  key.lda = A.ld;
  key.ldb = B.ld;
  key.ldc = ldc;
  key.transA = A.trans;
  key.transB = B.trans;
  key.bias = bias != nullptr;
  key.bias_grad = epilogue.bias_grad != nullptr;
  key.gelu = epilogue.gelu;
  key.batch = batch;
  key.strideA = batch > 1 ? A.stride : 0;
  key.strideB = batch > 1 ? B.stride : 0;
  key.strideC = batch > 1 ? strideC : 0;
  key.typeAB = A.type;
  key.typeC = c_type;
  key.alignA = alignment_of(A.data, key.strideA, A.type);
  key.alignB = alignment_of(B.data, key.strideB, B.type);
  key.alignC = alignment_of(C, key.strideC, c_type);
  key.alignBias = bias != nullptr               ? alignment_of(bias, 0, c_type)
                  : epilogue.bias_grad != nullptr ? alignment_of(epilogue.bias_grad, 0, c_type)
                                                  : 0;
  key.alignAux = gelu ? alignment_of(epilogue.aux, 0, c_type) : 0;
  const Plan& plan = plan_for(key, epilogue);
  if (!plan.usable) return false;
  // A cached plan was found with other pointers of the same alignments: point it at these.
  set_epilogue_pointers(plan, key, epilogue);
  XTRAIN_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, B.data, plan.first, A.data, plan.second, &beta, C,
                                     plan.out, C, plan.out, &plan.algo, workspace_, workspace_bytes_, stream_));
  return true;
}

}  // namespace xtrain::cuda
