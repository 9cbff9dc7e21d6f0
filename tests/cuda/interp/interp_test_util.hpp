// Interpret-mode library tests: device buffers through the runtime's cudaMalloc (whatever runtime
// the test links: in interpret mode device memory is host memory, so the test reads and writes it
// directly), the alignment rule the backend's plans use, and a launch's fault as text (only in
// files that are kernel units: xtrain_interp_kernel_units).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/kernels/portable.cuh"

namespace xtrain::interp::test {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (cudaMalloc(&p_, bytes > 0 ? bytes : 1) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) cudaFree(p_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) { o.p_ = nullptr; }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;

  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// Waits for the work enqueued so far (the interpret runtime runs it then, as a GPU may) and
// throws if it failed.
inline void synchronize() {
  if (cudaDeviceSynchronize() != cudaSuccess) throw std::runtime_error("the enqueued work failed");
}

// The largest power of two up to 256 dividing the address of every matrix of a batch (as
// cuda/gemm.cpp computes it for the heuristic's MIN_ALIGNMENT preferences).
inline uint32_t batch_alignment(const void* p, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u | static_cast<uint64_t>(stride_bytes);
  uint32_t a = 1;
  while ((bits & a) == 0) a <<= 1;
  return a;
}

// Launches and returns the fault as text: the launch check's message, or the error's name and
// words from the wait after it, where a fault in the kernel shows ("" for neither). Then resets
// the device so that the fault's sticky error does not outlive the test.
template <class... Params, class... Args>
std::string fault_of(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args... args) {
  std::string message;
  try {
    cuda::launch_kernel(kernel, grid, block, shared, nullptr, args...);
    const cudaError_t synced = cudaDeviceSynchronize();
    if (synced != cudaSuccess) message = std::string(cudaGetErrorName(synced)) + ": " + cudaGetErrorString(synced);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  cudaDeviceReset();
  return message;
}

}  // namespace xtrain::interp::test
