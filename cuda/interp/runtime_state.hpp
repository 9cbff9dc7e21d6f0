// Interpret mode's runtime state, shared by runtime.cpp (errors, devices, launches),
// runtime_memory.cpp and runtime_streams.cpp (streams, capture, events, graphs). One lock for
// all of it: the backend calls the runtime from one thread, and kernels run under the lock.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_interpret.hpp"
#include "cuda/interp/host_waits.hpp"
#include "cuda/interp/kernel_resources.hpp"

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
  bool held = false;                   // recorded while hold_event_completion was on, not waited for since
  // When its stream reached it, outside a capture: interpret mode runs work as it is issued, so
  // at its cudaEventRecord (what cudaEventElapsedTime reads).
  std::optional<std::chrono::steady_clock::time_point> reached;
};
struct CUgraph_st {
  std::vector<WorkItem> nodes;
};
struct CUgraphExec_st {
  std::vector<WorkItem> nodes;
};

namespace xtrain::interp {

struct Runtime {
  std::recursive_mutex mutex;
  cudaError_t sticky = cudaSuccess;  // a fault: every later call fails with it, as on a GPU
  cudaError_t last = cudaSuccess;
  std::string detail;                // what the fault or the last refusal was, in words
  std::vector<CUstream_st*> streams;  // live, for the capture rules
  CUstream_st legacy;
  std::map<const void*, int> max_dynamic_shared;
  struct LaunchedKernel {
    std::string name;                       // demangled
    const KernelResources* gpu = nullptr;   // its GPU build's resources; nullptr: not in the table
  };
  std::map<const void*, LaunchedKernel> kernels;  // looked up once per kernel, not per launch
  int schedules = 3;
  HostWaits waits;                          // host_waits.hpp
  bool hold_events = false;                 // host_waits.hpp's hold_event_completion
  std::vector<CUevent_st*> held;            // events recorded while it was on, not waited for yet
  std::map<std::uintptr_t, size_t> pinned;  // cudaHostAlloc'd host memory: start -> bytes

  Runtime() {
    legacy.flags = cudaStreamDefault;
    // The worker checked the setting before it loaded this plugin (cuda_interpret_requested);
    // a test binary that links interpret mode directly stops here on a bad one.
    schedules = interpret_settings().schedules;
  }
  ~Runtime();  // writes the host waits where XTRAIN_INTERP_HOST_WAITS says
};

Runtime& rt();

// Records `detail` as the reason for `code` (cudaGetErrorString adds it) and returns `code`.
cudaError_t refuse(cudaError_t code, std::string detail);
// The stream a handle names: nullptr is the legacy stream.
CUstream_st* resolve(cudaStream_t s);
// An unsafe call (allocation, synchronous copy, synchronisation) during a capture that forbids
// it: refused with cudaErrorStreamCaptureUnsupported and the capture invalidated, as CUDA does;
// cudaSuccess otherwise.
cudaError_t refuse_if_capturing(const char* call);
// Runs the work now, or records it while the stream is captured (stream_work.hpp's rule).
cudaError_t issue(cudaStream_t stream, WorkItem item);
bool known_stream(cudaStream_t s);
// A host wait: every held event counts as complete from now on.
void release_held_events();
// Whether [p, p + bytes) lies in one pinned host allocation.
bool is_pinned_range(const void* p, size_t bytes);

}  // namespace xtrain::interp
