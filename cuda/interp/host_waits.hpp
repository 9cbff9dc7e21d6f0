// Interpret mode's count of host waits: the calls after which the host has waited for device
// work, by kind, since the process started. A GPU's host would block in each of them (a
// pageable copy too: CUDA stages pageable memory through its own pinned buffer, and may return
// only once the copy is done), so the count of a training step is what its host waits cost on a
// GPU, whatever the interpreter does. The test of a step's waits reads it
// (tests/cuda/interp/test_interp_host_waits.cpp); with XTRAIN_INTERP_HOST_WAITS=FILE the process
// writes it to FILE as one JSON object when it exits ("%p" in FILE: the process id).
#pragma once

namespace xtrain::interp {

struct HostWaits {
  long stream_synchronize = 0;  // cudaStreamSynchronize
  long event_synchronize = 0;   // cudaEventSynchronize
  long device_synchronize = 0;  // cudaDeviceSynchronize
  long blocking_copy = 0;       // cudaMemcpy, cudaMemset
  long pageable_copy = 0;       // cudaMemcpyAsync from or to host memory that is not pinned
  long stream_query_done = 0;   // cudaStreamQuery finding the stream idle: a polling wait's end

  long total() const {
    return stream_synchronize + event_synchronize + device_synchronize + blocking_copy + pageable_copy +
           stream_query_done;
  }
};

HostWaits host_waits();

}  // namespace xtrain::interp
