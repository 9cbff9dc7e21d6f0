// Interpret mode's CUDA runtime: device memory, copies and memsets (runtime.cpp has the rules).
#include <cstring>
#include <string>

#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/runtime_state.hpp"
#include "cuda/interp/stream_work.hpp"

namespace xtrain::interp {
namespace {

// Which side of a copy must be device memory, by its kind (cudaMemcpyDefault: by the pointers).
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice ||
                          (kind == cudaMemcpyDefault && in_device_space(dst));
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice ||
                          (kind == cudaMemcpyDefault && in_device_space(src));
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) {
    return refuse(cudaErrorInvalidMemcpyDirection, "copy kind " + std::to_string(kind));
  }
  if (dst_device && !is_device_range(dst, bytes)) {
    return refuse(cudaErrorInvalidValue, "copy destination: " + describe_bad_device_range(dst, bytes));
  }
  if (src_device && !is_device_range(src, bytes)) {
    return refuse(cudaErrorInvalidValue, "copy source: " + describe_bad_device_range(src, bytes));
  }
  if (!dst_device && in_device_space(dst)) return refuse(cudaErrorInvalidValue, "copy destination is device memory, the kind says host");
  if (!src_device && in_device_space(src)) return refuse(cudaErrorInvalidValue, "copy source is device memory, the kind says host");
  return cudaSuccess;
}

}  // namespace
}  // namespace xtrain::interp

using xtrain::interp::refuse;
using xtrain::interp::rt;

// ---- memory -------------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  std::lock_guard lock(rt().mutex);
  if (rt().sticky != cudaSuccess) return rt().sticky;
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaMalloc")) return e;
  *ptr = xtrain::interp::device_allocate(bytes);
  if (*ptr == nullptr) {
    return refuse(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(bytes) + " bytes: " +
                                                 std::to_string(xtrain::interp::device_allocated_bytes()) +
                                                 " bytes are allocated already");
  }
  return cudaSuccess;
}
cudaError_t cudaFree(void* ptr) {
  std::lock_guard lock(rt().mutex);
  if (ptr == nullptr) return cudaSuccess;
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaFree")) return e;
  if (!xtrain::interp::device_free(ptr)) {
    return refuse(cudaErrorInvalidValue, "cudaFree of a pointer that is not a live allocation's start");
  }
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = xtrain::interp::kDeviceMemoryBytes;
  *free_bytes = *total_bytes - xtrain::interp::device_allocated_bytes();
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  *a = cudaPointerAttributes{};
  if (xtrain::interp::is_device_range(ptr, 1)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(ptr);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  if (const cudaError_t e = xtrain::interp::check_copy(dst, src, bytes, kind)) return e;
  return xtrain::interp::enqueue(stream, "cudaMemcpyAsync", [dst, src, bytes] { std::memmove(dst, src, bytes); });
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(rt().mutex);
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaMemcpy")) return e;
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  if (bytes != 0 && !xtrain::interp::is_device_range(ptr, bytes)) {
    return refuse(cudaErrorInvalidValue, "cudaMemsetAsync: " + xtrain::interp::describe_bad_device_range(ptr, bytes));
  }
  return xtrain::interp::enqueue(stream, "cudaMemsetAsync", [ptr, value, bytes] { std::memset(ptr, value, bytes); });
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  std::lock_guard lock(rt().mutex);
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaMemset")) return e;
  return cudaMemsetAsync(ptr, value, bytes, nullptr);
}
