// Interpret mode: how a library call (cuBLASLt's product, CUB's sort) becomes work on a stream.
// The runtime queues it on the stream, to run when the host waits for it (runtime_queue.cpp), or,
// while the stream is being captured, records it in the graph, which queues it at each replay. So
// `work` must hold the values of its arguments, not pointers to the caller's. `what` names the
// work in error messages.
#pragma once

#include <functional>

#include "driver_types.h"

namespace xtrain::interp {

// cudaErrorStreamCaptureInvalidated and friends come back as the call's error; a failure inside
// `work` (a std::exception) is reported as the stream's sticky error, as a faulting kernel's is.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work);

}  // namespace xtrain::interp
