// Interpret mode's CUDA runtime: streams and their capture, events, graphs (runtime.cpp has the
// rules; runtime_queue.cpp when the work of a stream runs, which the waits here ask for).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "cuda/interp/runtime_state.hpp"
#include "cuda/interp/stream_work.hpp"

using xtrain::interp::refuse;
using xtrain::interp::rt;

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
    xtrain::interp::finish_stream(stream);  // a GPU runs a destroyed stream's work to its end
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
  ++rt().waits.stream_synchronize;
  xtrain::interp::finish_stream(s);
  return rt().sticky;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  if (s->capturing) {
    s->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a stream being captured");
  }
  const std::uint64_t last = s->pending.empty() ? 0 : s->pending.back().seq;
  if (xtrain::interp::still_busy(s, last) && rt().sticky == cudaSuccess) {
    return cudaErrorNotReady;
  }
  if (rt().sticky == cudaSuccess) ++rt().waits.stream_query_done;
  return rt().sticky;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  if (event->captured_in != nullptr && event->captured_in != s) {
    return refuse(cudaErrorNotSupported, "interpret mode captures one stream: a wait joining another stream into a capture");
  }
  if (s->capturing || event->record == nullptr || xtrain::interp::done(event->record->seq)) return rt().sticky;
  const cudaError_t e = xtrain::interp::issue(stream, WorkItem{"cudaStreamWaitEvent", {}}, event->record->seq);
  return e != cudaSuccess ? e : rt().sticky;
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

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = new CUevent_st;
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::lock_guard lock(rt().mutex);
  delete event;
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard lock(rt().mutex);
  CUstream_st* s = xtrain::interp::resolve(stream);
  event->captured_in = s->capturing ? s : nullptr;
  if (event->captured_in != nullptr) return rt().sticky;
  auto record = std::make_shared<EventRecord>();
  const auto reach = [record] { record->reached = std::chrono::steady_clock::now(); };
  const cudaError_t e = xtrain::interp::issue(stream, WorkItem{"cudaEventRecord", reach}, 0, &record->seq);
  if (e != cudaSuccess) return e;
  event->record = std::move(record);
  return rt().sticky;
}
namespace {
// Whether its stream has run the event's last record; an event never recorded is complete.
bool reached(cudaEvent_t event) { return event->record == nullptr || xtrain::interp::done(event->record->seq); }
// An event recorded in a capture is no point in any stream's work yet: neither may be waited for.
cudaError_t event_state(cudaEvent_t event, const char* call) {
  if (event->captured_in != nullptr && event->captured_in->capturing) {
    event->captured_in->invalidated = true;
    return refuse(cudaErrorStreamCaptureUnsupported, std::string(call) + " of an event recorded in a capture");
  }
  return rt().sticky;
}
}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::lock_guard lock(rt().mutex);
  const cudaError_t e = event_state(event, "cudaEventSynchronize");
  if (e == cudaErrorStreamCaptureUnsupported) return e;
  ++rt().waits.event_synchronize;
  if (event->record != nullptr) xtrain::interp::finish_through(event->record->seq);
  return rt().sticky;
}
// Not ready while the work before the record is pending (runtime_queue.cpp's rule for queries).
cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard lock(rt().mutex);
  const cudaError_t e = event_state(event, "cudaEventQuery");
  if (e != cudaSuccess) return e;
  if (event->record != nullptr && xtrain::interp::still_busy(event, event->record->seq)) return cudaErrorNotReady;
  return rt().sticky;
}
// Host time between the two records' runs: the CPU's time for the work run between them.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::lock_guard lock(rt().mutex);
  for (cudaEvent_t event : {start, end}) {
    if (const cudaError_t e = event_state(event, "cudaEventElapsedTime"); e != cudaSuccess) return e;
    if (event->record == nullptr) {
      return refuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event never recorded");
    }
    if (!reached(event)) return cudaErrorNotReady;
    if (!event->record->reached) {
      return refuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of a record dropped by cudaDeviceReset");
    }
  }
  *ms = std::chrono::duration<float, std::milli>(*end->record->reached - *start->record->reached).count();
  return cudaSuccess;
}

// ---- graphs -------------------------------------------------------------------------------------

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return refuse(cudaErrorInvalidValue, "cudaGraphInstantiate of a null graph");
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return refuse(cudaErrorInvalidValue, "cudaGraphLaunch of a null graph");
  for (const WorkItem& node : exec->nodes) {
    if (const cudaError_t e = xtrain::interp::issue(stream, node)) return e;
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
