// Interpret mode's CUDA runtime: the API of cuda_runtime_api.h on the CPU. Work issued to a
// stream runs later, as on a GPU running behind its host: when the host waits for it (a
// synchronisation, a blocking copy, a query asked twice), in stream order and in the order across
// streams that is worst for a missing wait (runtime_queue.cpp). While a stream is captured its work
// is recorded into the graph instead, and the calls a real capture refuses are refused, with the
// real codes (CUDA Programming Guide, "Stream Capture": prohibited and unhandled operations; the
// capture is invalidated and cudaStreamEndCapture fails). This file: the state's rules, errors,
// devices and launches; runtime_queue.cpp, runtime_memory.cpp and runtime_streams.cpp the rest.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cuda/interp/device_builtins.hpp"
#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/runtime_state.hpp"
#include "cuda/interp/shared_memory.hpp"

namespace xtrain::interp {
namespace {

// A capture that the calling thread may not disturb with an unsafe call (the capture modes:
// global captures forbid it on every thread, thread-local ones on their own thread).
CUstream_st* capture_forbidding_unsafe_calls() {
  for (CUstream_st* s : rt().streams) {
    if (!s->capturing || s->mode == cudaStreamCaptureModeRelaxed) continue;
    if (s->mode == cudaStreamCaptureModeGlobal || s->capture_thread == std::this_thread::get_id()) return s;
  }
  return nullptr;
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
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
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

Runtime& rt() {
  static Runtime r;
  return r;
}

HostWaits host_waits() {
  std::lock_guard lock(rt().mutex);
  return rt().waits;
}

Runtime::~Runtime() {
  const char* asked = std::getenv("XTRAIN_INTERP_HOST_WAITS");
  if (asked == nullptr || *asked == '\0') return;
  std::string path = asked;  // "%p": this process's id, one file per rank
  if (const size_t at = path.find("%p"); at != std::string::npos) path.replace(at, 2, std::to_string(::getpid()));
  std::FILE* out = std::fopen(path.c_str(), "w");
  if (out == nullptr) return;
  std::fprintf(out,
               "{\"stream_synchronize\": %ld, \"event_synchronize\": %ld, \"device_synchronize\": %ld, "
               "\"blocking_copy\": %ld, \"pageable_copy\": %ld, \"stream_query_done\": %ld}\n",
               waits.stream_synchronize, waits.event_synchronize, waits.device_synchronize, waits.blocking_copy,
               waits.pageable_copy, waits.stream_query_done);
  std::fclose(out);
}

cudaError_t refuse(cudaError_t code, std::string detail) {
  Runtime& r = rt();
  r.last = code;
  r.detail = std::move(detail);
  return code;
}

CUstream_st* resolve(cudaStream_t s) { return s == nullptr ? &rt().legacy : s; }

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

bool known_stream(cudaStream_t s) {
  if (s == nullptr) return true;
  for (CUstream_st* x : rt().streams) {
    if (x == s) return true;
  }
  return false;
}

void launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_shared_bytes, cudaStream_t stream,
            std::shared_ptr<const KernelBody> body) {
  Runtime& r = rt();
  std::lock_guard lock(r.mutex);
  auto [known, first_launch] = r.kernels.try_emplace(kernel);
  if (first_launch) known->second = {kernel_name(kernel), find_gpu_kernel_resources_at(kernel, kEmulatedSm)};
  const std::string& name = known->second.name;
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64 || grid.x == 0 ||
      grid.y == 0 || grid.z == 0 || grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535) {
    refuse(cudaErrorInvalidConfiguration, name + ": grid (" + std::to_string(grid.x) + "," + std::to_string(grid.y) +
                                              "," + std::to_string(grid.z) + ") of blocks (" + std::to_string(block.x) +
                                              "," + std::to_string(block.y) + "," + std::to_string(block.z) +
                                              "): the device allows 1024 threads per block");
    return;
  }
  const auto allowed = r.max_dynamic_shared.find(kernel);
  if (const KernelResources* gpu = known->second.gpu) {
    const size_t allowed_bytes = allowed == r.max_dynamic_shared.end() ? 0 : static_cast<size_t>(allowed->second);
    if (auto refusal = gpu_launch_refusal(*gpu, static_cast<unsigned>(threads), dynamic_shared_bytes, allowed_bytes)) {
      refuse(refusal->error, name + ": " + refusal->why);
      return;
    }
  }
  if (dynamic_shared_bytes > kStaticSharedLimit) {
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
  // CUDA_LAUNCH_BLOCKING=1 makes launches synchronous, as CUDA's does, so that a fault shows at the
  // launch that made it. Read at every launch (CUDA reads it once), which lets a test set it.
  const char* blocking = std::getenv("CUDA_LAUNCH_BLOCKING");
  CUstream_st* s = resolve(stream);
  if (blocking != nullptr && std::string(blocking) == "1" && !s->capturing) finish_stream(s);
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
  p->totalGlobalMem = xtrain::interp::device_memory_bytes();
  p->sharedMemPerBlock = xtrain::interp::kStaticSharedLimit;
  p->sharedMemPerBlockOptin = xtrain::interp::kSharedOptinLimit;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 0x7FFFFFFF;
  p->maxGridSize[1] = p->maxGridSize[2] = 65535;
  p->major = xtrain::interp::kEmulatedSm / 10;
  p->minor = xtrain::interp::kEmulatedSm % 10;
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
  ++rt().waits.device_synchronize;
  xtrain::interp::finish_all();
  return rt().sticky;
}
// Forgets a fault and frees all device memory, as a reset of the device does.
cudaError_t cudaDeviceReset() {
  std::lock_guard lock(rt().mutex);
  xtrain::interp::drop_pending_work();
  xtrain::interp::device_free_all();
  rt().sticky = rt().last = cudaSuccess;
  rt().detail.clear();
  rt().max_dynamic_shared.clear();
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
