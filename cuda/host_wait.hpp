// Host waits that a lost peer cannot hang. A rank whose peer died or stalled inside a collective
// would block forever in cudaStreamSynchronize: the collective never ends, nor does any work
// ordered after it on the compute stream. So every host wait that can follow a collective polls
// instead: is the awaited work done (cudaStreamQuery), has the communicator seen an error
// (ncclCommGetAsyncError), has the deadline (the communicator's timeout) passed? The caller
// turns an error or the deadline into ncclCommAbort and a CommunicatorError.
//
// Plain C++ with the queries passed in, so the loop is tested without a GPU (tests/cuda/interp/
// test_host_wait.cpp: work that completes, fails, peers that fail, work that stalls).
#pragma once

#include <chrono>
#include <functional>

namespace xtrain::cuda {

struct HostWaitProbes {
  // Whether the awaited work is done; throws for an error of the work itself.
  std::function<bool()> work_done;
  // Throws when the peers' side reports an error (empty: nothing to watch).
  std::function<void()> check_peers;
};

// Polls `probes` every `pause` until the work is done (true) or `timeout` has passed since the
// call (false). The work is asked first, so work done at the deadline counts as done; a peer
// error seen at the deadline is thrown rather than reported as a timeout, being the more precise.
bool poll_until_done(const HostWaitProbes& probes, std::chrono::steady_clock::duration timeout,
                     std::chrono::microseconds pause = std::chrono::microseconds(20));

// `seconds` as the clock's duration, saturating at its largest (1e300 s means "never").
std::chrono::steady_clock::duration timeout_of(double seconds);

}  // namespace xtrain::cuda
