// Interpret mode's runtime state, shared by runtime.cpp (errors, devices, launches),
// runtime_queue.cpp (when issued work runs), runtime_memory.cpp and runtime_streams.cpp (streams,
// capture, events, graphs). One lock for all of it: the backend calls the runtime from one
// thread, and work runs under the lock.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/cuda_interpret.hpp"
#include "cuda/interp/host_waits.hpp"
#include "cuda/interp/kernel_resources.hpp"
#include "cuda/interp/stream_work.hpp"

struct WorkItem {
  std::string what;
  std::function<void()> run;
  std::function<xtrain::interp::GateState()> gate = {};  // empty: no gate (stream_work.hpp)
};

// Work issued to a stream and not run yet. `seq` numbers all issued work in issue order, across
// streams; `after` (0: none) is the seq of work that must have run first: an event waited for, or
// the legacy stream's implicit order with the blocking streams. A `work` without `run` only waits.
struct PendingWork {
  std::uint64_t seq = 0;
  std::uint64_t after = 0;
  WorkItem work;
};

struct CUstream_st {
  unsigned flags = cudaStreamDefault;
  std::deque<PendingWork> pending;  // in stream order
  bool capturing = false;
  bool invalidated = false;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  std::vector<WorkItem> recorded;
};
// An event's last record outside a capture: the seq of its place in the stream's work, and when
// the stream reached it (what cudaEventElapsedTime reads). Shared with that place's work, which
// may run after the event is destroyed.
struct EventRecord {
  std::uint64_t seq = 0;
  std::optional<std::chrono::steady_clock::time_point> reached;
};
struct CUevent_st {
  CUstream_st* captured_in = nullptr;   // the capturing stream it was last recorded in
  std::shared_ptr<EventRecord> record;  // nullptr: never recorded outside a capture
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
  std::map<std::uintptr_t, size_t> pinned;  // cudaHostAlloc'd host memory: start -> bytes

  std::uint64_t next_seq = 1;  // the seq of the next work issued (PendingWork)
  // The stream or event that the last query found busy, if no work has been issued since: asked
  // again, it is finished (runtime_queue.cpp's rule for polling loops).
  const void* polled = nullptr;
  struct PinnedSource;  // runtime_queue.cpp
  std::list<std::shared_ptr<PinnedSource>> pinned_sources;  // of copies issued and not run yet

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
// Queues the work on the stream, or records it while the stream is captured (stream_work.hpp's
// rule). `after`: the seq of work that must run first (0: none). Returns the work's seq (0 when
// recorded or refused) in `seq`.
cudaError_t issue(cudaStream_t stream, WorkItem item, std::uint64_t after = 0, std::uint64_t* seq = nullptr);
bool known_stream(cudaStream_t s);
// Whether the work numbered `seq` has run (0: nothing to run).
bool done(std::uint64_t seq);
// Host waits: run pending work through work `seq`, through a stream's last, or all of it; only
// what the wait needs, except for all. A fault while running drops the rest of the work (the
// sticky error says what happened). Gated work that is closed is waited for; one that never
// opens is a fault (on a GPU the wait would never return).
void finish_through(std::uint64_t seq);
void finish_stream(CUstream_st* s);
void finish_all();
// A query of `target` (a stream or event) whose last work is `last`: true ("not ready") while it
// is pending, unless the same target was asked last with no work issued since: then it is run
// first, as far as gated work lets it without waiting.
bool still_busy(const void* target, std::uint64_t last);
// cudaDeviceReset: the pending work is forgotten, as the device's is.
void drop_pending_work();
// Whether [p, p + bytes) lies in one pinned host allocation.
bool is_pinned_range(const void* p, size_t bytes);
// A copy between device memory and pinned host memory, outside a capture: the host's side is
// checked as a GPU's DMA would meet it when it runs (runtime_queue.cpp).
cudaError_t issue_pinned_copy(CUstream_st* s, void* dst, const void* src, size_t bytes);

}  // namespace xtrain::interp
