// Interpret mode's CUDA runtime: the API of cuda_runtime_api.h on the CPU. Every stream runs its
// work when it is issued (a valid order for one GPU: work on one stream is ordered, and the
// backend orders streams with events), except while it is captured: then the work is recorded
// into the graph, and the calls a real capture refuses are refused, with the real codes
// (CUDA Programming Guide, "Stream Capture": prohibited and unhandled operations; the capture is
// invalidated and cudaStreamEndCapture fails).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/interp/device_builtins.hpp"
#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/kernel_fault.hpp"
#include "cuda/interp/shared_memory.hpp"
#include "cuda/interp/stream_work.hpp"

struct WorkItem {
  std::string what;
  std::function<void()> run;
};

struct CUstream_st {
  unsigned flags = cudaStreamDefault;
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::vector<WorkItem> recorded;
};
struct CUevent_st {
  CUstream_st* captured_in = nullptr;  // the capturing stream it was last recorded in
};
struct CUgraph_st {
  std::vector<WorkItem> nodes;
};
struct CUgraphExec_st {
  std::vector<WorkItem> nodes;
};

namespace xtrain::interp {
namespace {

struct Runtime {
  std::recursive_mutex mutex;
  cudaError_t sticky = cudaSuccess;  // a fault: every later call fails with it, as on a GPU
  cudaError_t last = cudaSuccess;
  std::string detail;                // what the fault or the last refusal was, in words
  std::vector<CUstream_st*> streams;  // live, for the capture rules
  CUstream_st legacy;
  std::map<const void*, int> max_dynamic_shared;
  int schedules = 3;

  Runtime() {
    legacy.flags = cudaStreamDefault;
    if (const char* s = std::getenv("XTRAIN_INTERP_SCHEDULES"); s != nullptr && *s != '\0') schedules = std::atoi(s);
    if (schedules < 1) schedules = 1;
  }
};

Runtime& rt() {
  static Runtime r;
  return r;
}

cudaError_t refuse(cudaError_t code, std::string detail) {
  Runtime& r = rt();
  r.last = code;
  r.detail = std::move(detail);
  return code;
}

cudaError_t record_fault(cudaError_t code, const std::string& what) {
  Runtime& r = rt();
  r.sticky = r.last = code;
  r.detail = what;
  std::fprintf(stderr, "CUDA interpret mode: %s\n", what.c_str());
  return code;
}

CUstream_st* resolve(cudaStream_t s) { return s == nullptr ? &rt().legacy : s; }

// A capture that the calling thread may not disturb with an unsafe call (the capture modes:
// global captures forbid it on every thread, thread-local ones on their own thread).
CUstream_st* capture_forbidding_unsafe_calls() {
  for (CUstream_st* s : rt().streams) {
    if (!s->capturing || s->mode == cudaStreamCaptureModeRelaxed) continue;
    if (s->mode == cudaStreamCaptureModeGlobal || s->capture_thread == std::this_thread::get_id()) return s;
  }
  return nullptr;
}

// An unsafe call (allocation, synchronous copy, synchronisation) during a capture: refused, and
// the capture invalidated, as CUDA does.
cudaError_t refuse_if_capturing(const char* call) {
  if (CUstream_st* s = capture_forbidding_unsafe_calls()) {
    s->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported,
                  std::string(call) + " during stream capture (it would allocate or wait for the device)");
  }
  return cudaSuccess;
}

cudaError_t run_now(const WorkItem& item) {
  try {
    item.run();
  } catch (const KernelFault& f) {
    return record_fault(f.code(), f.what());
  } catch (const std::exception& e) {
    return record_fault(cudaErrorLaunchFailure, item.what + ": " + e.what());
  }
  return cudaSuccess;
}

cudaError_t issue(cudaStream_t stream, WorkItem item) {
  Runtime& r = rt();
  std::lock_guard lock(r.mutex);
  if (r.sticky != cudaSuccess) return r.sticky;
  CUstream_st* s = resolve(stream);
  if (s->capturing) {
    if (s->invalidated) return refuse(cudaErrorStreamCaptureInvalidated, "the capture was invalidated by an earlier call");
    s->recorded.push_back(std::move(item));
    return cudaSuccess;
  }
  if (s == &r.legacy) {
    for (CUstream_st* other : r.streams) {
      if (other->capturing && !(other->flags & cudaStreamNonBlocking)) {
        other->invalidated = true;
        return refuse(cudaErrorStreamCaptureImplicit,
                      item.what + " on the legacy stream while a blocking stream is captured");
      }
    }
  }
  return run_now(item);
}

bool known_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  for (CUstream_st* x : rt().streams) {
    if (x == s) return true;
  }
  return false;
}

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

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorAssert: return "cudaErrorAssert";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched: return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
  }
  return "cudaErrorUnknown";
}

const char* error_words(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnmatched: return "capture was not initiated in this stream";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream depend on a capturing blocking stream";
    default: return error_name(e);
  }
}

}  // namespace

cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work) {
  return issue(stream, WorkItem{what, std::move(work)});
}

void launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            std::shared_ptr<const KernelBody> body) {
  Runtime& r = rt();
  std::lock_guard lock(r.mutex);
  const std::string name = kernel_name(kernel);
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535) {
    refuse(cudaErrorInvalidConfiguration, name + ": grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) +
                                              "," + std::to_string(grid.z) + ") of blocks (" + std::to_string(block.x) +
                                              "," + std::to_string(block.y) + "," + std::to_string(block.z) +
                                              "): the device allows 1024 threads per block");
    return;
  }
  if (dynamic_shared_bytes > kStaticSharedLimit) {
    const auto allowed = r.max_dynamic_shared.find(kernel);
    if (allowed == r.max_dynamic_shared.end() || static_cast<size_t>(allowed->second) < dynamic_shared_bytes) {
      refuse(cudaErrorInvalidValue, name + ": " + std::to_string(dynamic_shared_bytes) +
                                        " bytes of dynamic shared memory need cudaFuncSetAttribute("
                                        "cudaFuncAttributeMaxDynamicSharedMemorySize) first (48 KiB without it)");
      return;
    }
  }
  if (!body->instrumented()) {
    refuse(cudaErrorInvalidValue, name + ": its file was compiled without interpret mode's access hooks "
                                         "(list it with xtrain_interp_kernel_units), so its accesses would go unchecked");
    return;
  }
  if (!known_stream(stream)) {
    refuse(cudaErrorInvalidResourceHandle, name + ": launched on a stream that does not exist");
    return;
  }
  LaunchConfig config{name, kernel, grid, block, dynamic_shared_bytes};
  const int schedules = r.schedules;
  issue(stream, WorkItem{"kernel " + name, [config, body, schedules] { execute_under_schedules(config, *body, schedules); }});
}


}  // namespace xtrain::interp

using xtrain::interp::refuse;
using xtrain::interp::rt;

// ---- errors and devices -------------------------------------------------------------------------

cudaError_t cudaGetLastError() {
  std::lock_guard lock(rt().mutex);
  const cudaError_t e = rt().sticky != cudaSuccess ? rt().sticky : rt().last;
  rt().last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  std::lock_guard lock(rt().mutex);
  return rt().sticky != cudaSuccess ? rt().sticky : rt().last;
}
const char* cudaGetErrorName(cudaError_t error) { return xtrain::interp::error_name(error); }
// The documented words, and in interpret mode what exactly was wrong (a fault names the kernel,
// the block and the thread).
const char* cudaGetErrorString(cudaError_t error) {
  thread_local std::string text;
  std::lock_guard lock(rt().mutex);
  text = xtrain::interp::error_words(error);
  if (error != cudaSuccess && (error == rt().sticky || error == rt().last || rt().last == cudaSuccess) &&
      !rt().detail.empty()) {
    text += "; interpret mode: " + rt().detail;
  }
  return text.c_str();
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device != 0) return refuse(cudaErrorInvalidDevice, "interpret mode has one device, 0");
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "NVIDIA H200 (interpret mode)");
  p->totalGlobalMem = xtrain::interp::kDeviceMemoryBytes;
  p->sharedMemPerBlock = xtrain::interp::kStaticSharedLimit;
  p->sharedMemPerBlockOptin = xtrain::interp::kSharedOptinLimit;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7FFFFFFF;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : refuse(cudaErrorInvalidDevice, "interpret mode has one device, 0");
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  std::lock_guard lock(rt().mutex);
  if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaDeviceSynchronize")) return e;
  return rt().sticky;
}
// Forgets a fault and frees all device memory, as a reset of the device does.
cudaError_t cudaDeviceReset() {
  std::lock_guard lock(rt().mutex);
  xtrain::interp::device_free_all();
  rt().sticky = rt().last = cudaSuccess;
  rt().detail.clear();
  rt().max_dynamic_shared.clear();
  return cudaSuccess;
}

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

// ---- streams and capture ------------------------------------------------------------------------

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  std::lock_guard lock(rt().mutex);
  auto* s = new CUstream_st;
  s->flags = flags;
  rt().streams.push_back(s);
  *stream = s;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  auto& all = rt().streams;
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (*it != stream) continue;
    all.erase(it);
    delete stream;
    return cudaSuccess;
  }
  return refuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of a stream that does not exist");
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  if (s->capturing) {
    s->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported, "cudaStreamSynchronize of a stream being captured");
  }
  if (s == &rt().legacy) {
    if (const cudaError_t e = xtrain::interp::refuse_if_capturing("cudaStreamSynchronize(legacy stream)")) return e;
  }
  return rt().sticky;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  if (s->capturing) {
    s->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a stream being captured");
  }
  return rt().sticky;  // all issued work is done
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  if (event->captured_in != nullptr && event->captured_in != s) {
    return refuse(cudaErrorNotSupported, "interpret mode captures one stream: a wait joining another stream into a capture");
  }
  return rt().sticky;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  std::lock_guard lock(rt().mutex);
  if (stream == nullptr) return refuse(cudaErrorStreamCaptureUnsupported, "capture of the legacy stream");
  if (stream->capturing) return refuse(cudaErrorIllegalState, "cudaStreamBeginCapture of a stream being captured");
  stream->capturing = true;
  stream->invalidated = false;
  stream->mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->recorded.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard lock(rt().mutex);
  *graph = nullptr;
  if (stream == nullptr || !stream->capturing) {
    return refuse(cudaErrorStreamCaptureUnmatched, "cudaStreamEndCapture of a stream not being captured");
  }
  stream->capturing = false;
  std::vector<WorkItem> nodes = std::move(stream->recorded);
  stream->recorded.clear();
  if (stream->invalidated) {
    stream->invalidated = false;
    return refuse(cudaErrorStreamCaptureInvalidated, "the capture was invalidated by an earlier call");
  }
  *graph = new CUgraph_st{std::move(nodes)};
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  *status = !s->capturing ? cudaStreamCaptureStatusNone
                          : s->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// ---- events -------------------------------------------------------------------------------------
// Work is done when issued, so an event is complete once recorded; only its capture matters.

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  event->captured_in = s->capturing ? s : nullptr;
  return rt().sticky;
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(rt().mutex);
  if (event->captured_in != nullptr && event->captured_in->capturing) {
    event->captured_in->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported, "cudaEventSynchronize of an event recorded in a capture");
  }
  return rt().sticky;
}
cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

// ---- graphs -------------------------------------------------------------------------------------

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return refuse(cudaErrorInvalidValue, "cudaGraphInstantiate of a null graph");
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return refuse(cudaErrorInvalidValue, "cudaGraphLaunch of a null graph");
  for (const WorkItem& node : exec->nodes) {
    if (const cudaError_t e = xtrain::interp::enqueue(stream, node.what.c_str(), node.run)) return e;
  }
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  std::lock_guard lock(rt().mutex);
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) {
    return refuse(cudaErrorInvalidValue, "interpret mode knows cudaFuncAttributeMaxDynamicSharedMemorySize only");
  }
  if (value < 0 || static_cast<size_t>(value) > xtrain::interp::kSharedOptinLimit) {
    return refuse(cudaErrorInvalidValue, "cudaFuncAttributeMaxDynamicSharedMemorySize " + std::to_string(value) +
                                             " is over the device's 227 KiB per block");
  }
  rt().max_dynamic_shared[kernel] = value;
  return cudaSuccess;
}
