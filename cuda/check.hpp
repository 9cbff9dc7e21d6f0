// Error checks for CUDA runtime, cuBLAS and kernel launches: a failure throws std::runtime_error
// naming the call, the file and line, and the library's own words, so a rank's last log line
// says what broke (never a silent exit code).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace xtrain::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error in ") + call + " at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

[[noreturn]] inline void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error in ") + call + " at " + file + ":" + std::to_string(line) +
                           ": status " + std::to_string(static_cast<int>(status)) + " (" +
                           cublasLtGetStatusString(status) + ")");
}

}  // namespace xtrain::cuda

#define XTRAIN_CUDA_CHECK(call)                                                           \
  do {                                                                                    \
    const cudaError_t xtrain_err_ = (call);                                               \
    if (xtrain_err_ != cudaSuccess) ::xtrain::cuda::throw_cuda_error(xtrain_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define XTRAIN_CUBLAS_CHECK(call)                                                         \
  do {                                                                                    \
    const cublasStatus_t xtrain_status_ = (call);                                         \
    if (xtrain_status_ != CUBLAS_STATUS_SUCCESS)                                          \
      ::xtrain::cuda::throw_cublas_error(xtrain_status_, #call, __FILE__, __LINE__);      \
  } while (0)

// After every kernel launch: catches bad launch configurations at once (asynchronous faults
// surface at the next synchronising call, which is checked too).
#define XTRAIN_LAUNCH_CHECK() XTRAIN_CUDA_CHECK(cudaGetLastError())
