// Data-parallel collectives over NCCL, for ranks on the CUDA backend.
//
// Overlap: start_all_reduce_average records an event on the compute stream and issues the
// all-reduce on a dedicated communication stream that waits for that event, so the bucket's
// all-reduce runs while backward continues on the compute stream; finish_all_reduces makes the
// compute stream wait for the communication stream (an event, not a host wait). Nothing in a
// step synchronises the device.
//
// Bounded waits: a peer that dies or stalls inside a collective leaves it unfinished, and with it
// all that the compute stream ordered after it. So the communicator installs its wait in the
// backend (CudaBackend::set_stream_wait): every host wait, its own (the blocking collectives) and
// the backend's (downloads, sum_squares, synchronize), polls the stream and NCCL's asynchronous
// error against kCollectiveTimeoutS (cuda/host_wait.hpp), then aborts the communicator and throws
// a CommunicatorError (failure_kind "peer_lost"). Starting it and issuing a call are bounded by
// the rendezvous timeout the constructor takes.
//
// Bounded start: the communicator is created non-blocking (ncclConfig_t::blocking = 0) and
// polled; a peer that never arrives makes init fail after the timeout with the communicator
// aborted, instead of hanging the rank forever.
//
// Averages use ncclAvg: every element's result is computed once along NCCL's ring or tree and
// copied to every rank, so all ranks hold bitwise the same values.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <functional>
#include <string>

#include "common/worker_env.hpp"
#include "cuda/cuda_backend.hpp"
#include "worker/comm/communicator.hpp"

namespace xtrain::cuda {

// The unique id of this rank's world: XTRAIN_NCCL_ID decoded, or a fresh local id for a world
// of one run by hand. Throws std::invalid_argument (naming XTRAIN_NCCL_ID, the rank and what is
// wrong) when it is missing in a larger world or malformed. Makes no CUDA call.
ncclUniqueId resolve_nccl_id(const WorkerEnv& env);

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const WorkerEnv& env, CudaBackend& backend, double init_timeout_s);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string name() const override { return "nccl"; }

  void start_all_reduce_average(GradBucket bucket) override;
  void finish_all_reduces() override;
  void all_reduce_average(float* data, size_t count) override;
  void broadcast(float* data, size_t count, int root) override;
  void barrier() override;

 private:
  // The communication stream waits for everything issued on the compute stream so far.
  void order_after_compute();
  // A non-blocking communicator may answer ncclInProgress while it finishes issuing a call:
  // poll until the call is issued, failing on an error or after the timeout.
  void wait_issued(ncclResult_t issued, const char* call);
  // Host waits until `stream` is idle, watching for NCCL errors meanwhile, for at most
  // kCollectiveTimeoutS (worker/comm/communicator.hpp, as Gloo's collectives): then aborts and
  // throws CommunicatorError.
  void wait_for_stream(cudaStream_t stream, const char* call);
  // Throws (fail) when NCCL reports an asynchronous error; nothing once aborted.
  void check_async_error(const char* call);
  [[noreturn]] void fail_timed_out(const char* call, double waited_s, const char* cause);  // aborts, then throws
  // A blocking collective on `data` (device or host memory): ordered after the compute
  // stream, issued by `issue` on the device buffer, finished before returning.
  void run_blocking(float* data, size_t count, const char* call, const std::function<ncclResult_t(float*)>& issue);
  // Device memory holding `count` floats: `data` itself, or the staging buffer for host data.
  float* device_view(float* data, size_t count, bool& staged);
  [[noreturn]] void fail(const std::string& what, ncclResult_t result);  // aborts, then throws
  void release();  // finalize (or abort) the communicator and free what the constructor made

  int rank_;
  int world_;
  int device_;
  double timeout_s_;
  CudaBackend& backend_;  // outlives the communicator; holds our wait while we live
  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;
  cudaEvent_t comm_done_ = nullptr;
  bool pending_ = false;  // buckets started since the last finish_all_reduces
  float* staging_ = nullptr;  // device copy of host data for the blocking collectives
  size_t staging_count_ = 0;
};

}  // namespace xtrain::cuda
