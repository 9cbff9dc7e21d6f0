// Interpret mode: cuBLASLt's handle, status names and descriptor calls (create, set an attribute,
// destroy). Only the attributes the backend sets are emulated; any other is refused with
// CUBLAS_STATUS_NOT_SUPPORTED rather than silently ignored, so a new use shows up at once.
#include <cstring>
#include <string>

#include "cuda/interp/cublaslt_state.hpp"

namespace xtrain::interp {
namespace {

thread_local std::string t_detail;

// The real library checks a value's size against the attribute's type: INVALID_VALUE otherwise.
template <class T>
cublasStatus_t set_value(T& field, const void* buf, size_t size, const char* what) {
  if (buf == nullptr || size != sizeof(T)) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": a value of " + std::to_string(size) +
                                                   " bytes" + (buf ? "" : " at NULL") + ", expected " +
                                                   std::to_string(sizeof(T)) + " bytes");
  }
  std::memcpy(&field, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t not_emulated(const char* kind, int attr) {
  return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                std::string(kind) + " attribute " + std::to_string(attr) + " is not emulated in interpret mode");
}

template <class T>
cublasStatus_t create(T** out, const char* what) {
  if (out == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, std::string(what) + ": NULL output pointer");
  *out = new T;
  return CUBLAS_STATUS_SUCCESS;
}

// Destroying NULL is allowed, as in the real library.
template <class T>
cublasStatus_t destroy(T* p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t refuse(cublasStatus_t status, const std::string& why) {
  t_detail = why;
  return status;
}

const std::string& last_cublas_detail() { return t_detail; }

}  // namespace xtrain::interp

using xtrain::interp::refuse;

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

// The status's name, which the backend's error messages print next to its number.
const char* cublasLtGetStatusString(cublasStatus_t status) { return cublasLtGetStatusName(status); }

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { return xtrain::interp::create(handle, "cublasLtCreate"); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: NULL handle");
  return xtrain::interp::destroy(handle);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  const cublasStatus_t status = xtrain::interp::create(desc, "cublasLtMatmulDescCreate");
  if (status == CUBLAS_STATUS_SUCCESS) {
    (*desc)->compute = compute;
    (*desc)->scale = scale;
  }
  return status;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { return xtrain::interp::destroy(desc); }

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  using xtrain::interp::set_value;
  if (desc == nullptr) return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: NULL descriptor");
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA: return set_value(desc->transa, buf, size, "CUBLASLT_MATMUL_DESC_TRANSA");
    case CUBLASLT_MATMUL_DESC_TRANSB: return set_value(desc->transb, buf, size, "CUBLASLT_MATMUL_DESC_TRANSB");
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_value(desc->epilogue, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE");
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return set_value(desc->bias, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_POINTER");
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return set_value(desc->bias_type, buf, size, "CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return set_value(desc->aux, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return set_value(desc->aux_ld, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD");
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return set_value(desc->aux_type, buf, size, "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE");
    default: return xtrain::interp::not_emulated("matmul descriptor", attr);
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  const cublasStatus_t status = xtrain::interp::create(layout, "cublasLtMatrixLayoutCreate");
  if (status == CUBLAS_STATUS_SUCCESS) {
    (*layout)->type = static_cast<uint32_t>(type);
    (*layout)->rows = rows;
    (*layout)->cols = cols;
    (*layout)->ld = ld;
  }
  return status;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { return xtrain::interp::destroy(layout); }

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  using xtrain::interp::set_value;
  if (layout == nullptr) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: NULL layout");
  }
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return set_value(layout->type, buf, size, "CUBLASLT_MATRIX_LAYOUT_TYPE");
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return set_value(layout->rows, buf, size, "CUBLASLT_MATRIX_LAYOUT_ROWS");
    case CUBLASLT_MATRIX_LAYOUT_COLS: return set_value(layout->cols, buf, size, "CUBLASLT_MATRIX_LAYOUT_COLS");
    case CUBLASLT_MATRIX_LAYOUT_LD: return set_value(layout->ld, buf, size, "CUBLASLT_MATRIX_LAYOUT_LD");
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return set_value(layout->batch, buf, size, "CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT");
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return set_value(layout->stride, buf, size, "CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET");
    default: return xtrain::interp::not_emulated("matrix layout", attr);
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return xtrain::interp::create(pref, "cublasLtMatmulPreferenceCreate");
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return xtrain::interp::destroy(pref);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  using xtrain::interp::set_value;
  if (pref == nullptr) {
    return refuse(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: NULL preference");
  }
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return set_value(pref->max_workspace, buf, size, "CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return set_value(pref->align[0], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return set_value(pref->align[1], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return set_value(pref->align[2], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES");
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return set_value(pref->align[3], buf, size, "CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES");
    default: return xtrain::interp::not_emulated("matmul preference", attr);
  }
}
