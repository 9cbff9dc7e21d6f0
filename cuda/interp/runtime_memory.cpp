// Interpret mode's CUDA runtime: device memory, copies and memsets (runtime.cpp has the rules).
#include <cstdlib>
#include <cstring>
#include <iterator>
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

bool is_pinned_range(const void* p, size_t bytes) {
  const auto& pinned = rt().pinned;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = pinned.upper_bound(a);
  if (it == pinned.begin()) return false;
  --it;
  return a - it->first + bytes <= it->second;
}

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
  xtrain::interp::finish_all();  // the comment above cudaHostAlloc says why
  if (!xtrain::interp::device_free(ptr)) {
    return refuse(cudaErrorInvalidValue, "cudaFree of a pointer that is not a live allocation's start");
  }
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  *total_bytes = xtrain::interp::device_memory_bytes();
  *free_bytes = *total_bytes - xtrain::interp::device_allocated_bytes();
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* ptr) {
  *a = cudaPointerAttributes{};
  if (xtrain::interp::is_device_range(ptr, 1)) {
    a->type = cudaMemoryTypeDevice;
    a->devicePointer = const_cast<void*>(ptr);
  } else if (std::lock_guard lock(rt().mutex); xtrain::interp::is_pinned_range(ptr, 1)) {
    a->type = cudaMemoryTypeHost;
    a->hostPointer = const_cast<void*>(ptr);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}
namespace xtrain::interp {
namespace {
// How a GPU runs a copy with a host side (CUDA Runtime API, "API synchronization behavior"): with
// pinned memory it is a DMA on the stream, issue_pinned_copy's; with pageable memory the stream
// is synchronised first and the call returns once the data have left the source (upload) or
// arrived (download), so here it is run before the call returns.
cudaError_t copy_async(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t e = check_copy(dst, src, bytes, kind)) return e;
  CUstream_st* s = resolve(stream);
  const bool host_dst = !in_device_space(dst), host_src = !in_device_space(src);
  const bool pinned = (!host_dst || is_pinned_range(dst, bytes)) && (!host_src || is_pinned_range(src, bytes));
  if (bytes != 0 && !s->capturing && (host_dst || host_src) && pinned) return issue_pinned_copy(s, dst, src, bytes);
  const cudaError_t e = enqueue(stream, "cudaMemcpyAsync", [dst, src, bytes] { std::memmove(dst, src, bytes); });
  if (e != cudaSuccess || bytes == 0 || pinned || s->capturing) return e;
  finish_stream(s);  // pageable
  return rt().sticky;
}
// cudaMemcpy and cudaMemset, once their work is issued on the legacy stream: a host wait for it.
cudaError_t finish_blocking_call() {
  ++rt().waits.blocking_copy;
  finish_stream(&rt().legacy);
  return rt().sticky;
}
}  // namespace
}  // namespace xtrain::interp

// Pinned host memory: plain host memory that the runtime knows, as page-locked memory is to a
// GPU's: cudaPointerGetAttributes says cudaMemoryTypeHost, and copies from and to it are
// asynchronous (nothing counted in host_waits.hpp). Freeing it, as freeing device memory, waits
// for all pending work first: the driver's implicit synchronisation, which CUDA documents as
// "may" and which a freed buffer still in a copy's use would need.
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int) {
  std::lock_guard lock(rt().mutex);
  if (rt().sticky != cudaSuccess) return rt().sticky;
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  if (*ptr == nullptr) return refuse(cudaErrorMemoryAllocation, "cudaHostAlloc of " + std::to_string(bytes) + " bytes");
  rt().pinned[reinterpret_cast<std::uintptr_t>(*ptr)] = bytes == 0 ? 1 : bytes;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, cudaHostAllocDefault); }
cudaError_t cudaFreeHost(void* ptr) {
  std::lock_guard lock(rt().mutex);
  if (ptr == nullptr) return cudaSuccess;
  xtrain::interp::finish_all();
  if (rt().pinned.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
    return refuse(cudaErrorInvalidValue, "cudaFreeHost of a pointer that cudaHostAlloc did not return");
  }
  std::free(ptr);
  return cudaSuccess;
}

// A copy with a host side that is not pinned waits for the device on a GPU: counted.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  const cudaError_t e = xtrain::interp::copy_async(dst, src, bytes, kind, stream);
  if (e != cudaSuccess || bytes == 0) return e;
  const auto pageable = [bytes](const void* p) {
    return !xtrain::interp::in_device_space(p) && !xtrain::interp::is_pinned_range(p, bytes);
  };
  if (pageable(dst) || pageable(src)) ++rt().waits.pageable_copy;
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  std::lock_guard lock(rt().mutex);
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaMemcpy")) return e;
  const cudaError_t e = xtrain::interp::copy_async(dst, src, bytes, kind, nullptr);
  return e != cudaSuccess ? e : xtrain::interp::finish_blocking_call();
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
  const cudaError_t e = cudaMemsetAsync(ptr, value, bytes, nullptr);
  return e != cudaSuccess ? e : xtrain::interp::finish_blocking_call();
}
