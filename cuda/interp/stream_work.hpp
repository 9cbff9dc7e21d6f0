// Interpret mode: how a library call (cuBLASLt's product, CUB's sort) becomes work on a stream.
// The runtime queues it on the stream, to run when the host waits for it (runtime_queue.cpp), or,
// while the stream is being captured, records it in the graph, which queues it at each replay. So
// `work` must hold the values of its arguments, not pointers to the caller's. `what` names the
// work in error messages.
#pragma once

#include <functional>
#include <string>

#include "driver_types.h"

namespace xtrain::interp {

// Whether gated work may run yet (enqueue_gated). `stuck`, while closed: why it never will open.
struct GateState {
  bool open = true;
  std::string stuck;
};

// cudaErrorStreamCaptureInvalidated and friends come back as the call's error; a failure inside
// `work` (a std::exception) is reported as the stream's sticky error, as a faulting kernel's is.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

// Work that also waits for something outside this process (interpret mode's NCCL: the peers'
// parts of a collective): it runs once `gate` says open. A gate that is closed holds up the
// stream; while closed, it may say that it never will open (GateState above), which
// is a fault at a host wait. Such work is not captured (cudaErrorStreamCaptureUnsupported).
cudaError_t enqueue_gated(cudaStream_t stream, const char* what, std::function<GateState()> gate,
                          std::function<void()> work);

// Runs the stream's pending work (and what it waits for) as far as closed gates let it, without
// waiting; returns whether all of it has run. What a GPU does by itself, for a library whose
// progress does not wait for the host (NCCL's finalize).
bool advance_stream(cudaStream_t stream);

}  // namespace xtrain::interp
