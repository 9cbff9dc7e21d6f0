#include "cuda/nccl_communicator.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/gpu/nccl_id.hpp"
#include "cuda/check.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/host_wait.hpp"

namespace xtrain::cuda {
namespace {

using Clock = std::chrono::steady_clock;

Clock::time_point deadline_after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string seconds(double s) {
  std::string text = std::to_string(s);
  text.erase(text.find_last_not_of('0') + 1);
  if (!text.empty() && text.back() == '.') text.pop_back();
  return text + " s";
}

}  // namespace

ncclUniqueId resolve_nccl_id(const WorkerEnv& env) {
  static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NCCL's unique id size changed");
  const int rank = env.where.rank, world = env.where.world_size;
  ncclUniqueId id{};
  if (env.nccl_id_hex.empty()) {
    if (world > 1) {
      throw std::invalid_argument(std::string(env::kNcclId) + " is not set: rank " + std::to_string(rank) + " of " +
                                  std::to_string(world) +
                                  " needs the NCCL id that xlaunch gives every rank (backend nccl)");
    }
    const ncclResult_t r = ncclGetUniqueId(&id);  // a world of one: nobody to share it with
    if (r != ncclSuccess) {
      throw std::runtime_error(std::string("ncclGetUniqueId failed: ") + ncclGetErrorString(r));
    }
    return id;
  }
  NcclIdBytes bytes;
  try {
    bytes = decode_nccl_id(env.nccl_id_hex);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " (rank " + std::to_string(rank) + ")");
  }
  std::memcpy(id.internal, bytes.data(), bytes.size());
  return id;
}

NcclCommunicator::NcclCommunicator(const WorkerEnv& env, CudaBackend& backend, double init_timeout_s)
    : rank_(env.where.rank),
      world_(env.where.world_size),
      device_(backend.device()),
      timeout_s_(init_timeout_s),
      backend_(backend),
      compute_(backend.stream()) {
  const ncclUniqueId id = resolve_nccl_id(env);  // before any CUDA or NCCL call
  try {
    XTRAIN_CUDA_CHECK(cudaSetDevice(device_));
    XTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking));
    XTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    XTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    wait_issued(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config), "ncclCommInitRankConfig");
    backend_.set_stream_wait([this](cudaStream_t stream, const char* what) { wait_for_stream(stream, what); });
  } catch (...) {
    release();
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() { release(); }

void NcclCommunicator::release() {
  backend_.set_stream_wait({});
  if (comm_ != nullptr) {
    // Finalize flushes outstanding work; it is non-blocking too, so poll it with the timeout
    // and abort rather than hang when a peer is gone.
    const ncclResult_t finalize = ncclCommFinalize(comm_);
    bool clean = finalize == ncclSuccess || finalize == ncclInProgress;
    const Clock::time_point deadline = deadline_after(timeout_s_);
    while (clean) {
      ncclResult_t state = ncclInProgress;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess || (state != ncclSuccess && state != ncclInProgress) ||
          Clock::now() > deadline) {
        clean = false;
      } else if (state == ncclSuccess) {
        break;
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (clean) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
  }
  comm_ = nullptr;
  cudaFree(staging_);
  staging_ = nullptr;
  if (comm_done_ != nullptr) cudaEventDestroy(comm_done_);
  if (compute_ready_ != nullptr) cudaEventDestroy(compute_ready_);
  if (comm_stream_ != nullptr) cudaStreamDestroy(comm_stream_);
  comm_done_ = compute_ready_ = nullptr;
  comm_stream_ = nullptr;
}

void NcclCommunicator::fail(const std::string& what, ncclResult_t result) {
  std::string detail;
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') detail = std::string(": ") + last;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  } else {
    const char* last = ncclGetLastError(nullptr);
    if (last != nullptr && *last != '\0') detail = std::string(": ") + last;
  }
  const std::string message = "NCCL: rank " + std::to_string(rank_) + " of " + std::to_string(world_) + ": " + what +
                              " failed with " + ncclGetErrorString(result) + detail;
  // A peer that died or dropped off the network shows here as a remote or system error: the
  // echo of a failure elsewhere (failure_kind "peer_lost"), not this rank's own.
  if (result == ncclRemoteError || result == ncclSystemError) throw CommunicatorError(message);
  throw std::runtime_error(message);
}

// The error of a call that did not finish within the timeout: the communicator is aborted (which
// also ends its kernels, so the streams drain) and the failure is a lost peer's.
void NcclCommunicator::fail_timed_out(const char* call, double waited_s, const char* cause) {
  if (comm_ != nullptr) ncclCommAbort(comm_);
  comm_ = nullptr;
  throw CommunicatorError("NCCL: rank " + std::to_string(rank_) + " of " + std::to_string(world_) + " (GPU " +
                          std::to_string(device_) + "): " + call + " did not complete within " +
                          seconds(waited_s) + "; aborted. " + cause);
}

void NcclCommunicator::check_async_error(const char* call) {
  if (comm_ == nullptr) return;  // aborted: nothing left to report, the deadline still holds
  ncclResult_t state = ncclSuccess;
  const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
  if (polled != ncclSuccess) fail(call, polled);
  if (state != ncclSuccess && state != ncclInProgress) fail(call, state);
}

void NcclCommunicator::wait_issued(ncclResult_t issued, const char* call) {
  if (comm_ == nullptr) {
    if (issued != ncclSuccess && issued != ncclInProgress) fail(call, issued);
    throw std::logic_error(std::string("NCCL communicator used after it was aborted: ") + call);
  }
  if (issued == ncclSuccess) return;
  if (issued != ncclInProgress) fail(call, issued);
  const auto issued_now = [&] {
    ncclResult_t state = ncclInProgress;
    const ncclResult_t polled = ncclCommGetAsyncError(comm_, &state);
    if (polled != ncclSuccess) fail(call, polled);
    if (state != ncclSuccess && state != ncclInProgress) fail(call, state);
    return state == ncclSuccess;
  };
  if (!poll_until_done({issued_now, {}}, timeout_of(timeout_s_), std::chrono::microseconds(100))) {
    fail_timed_out(call, timeout_s_,
                   "A peer rank never started, died, or stopped answering, or the bootstrap address in "
                   "XTRAIN_NCCL_ID is unreachable (see NCCL_SOCKET_IFNAME)");
  }
}

void NcclCommunicator::wait_for_stream(cudaStream_t stream, const char* call) {
  const auto stream_done = [stream] {
    const cudaError_t done = cudaStreamQuery(stream);
    if (done != cudaErrorNotReady) XTRAIN_CUDA_CHECK(done);
    return done == cudaSuccess;
  };
  if (!poll_until_done({stream_done, [&] { check_async_error(call); }}, timeout_of(kCollectiveTimeoutS))) {
    fail_timed_out(call, kCollectiveTimeoutS,
                   "A peer rank died or stopped answering inside a collective (this rank's GPU work waits for it)");
  }
}

void NcclCommunicator::order_after_compute() {
  XTRAIN_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_));
  XTRAIN_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
}

void NcclCommunicator::start_all_reduce_average(GradBucket bucket) {
  if (bucket.count == 0) return;
  order_after_compute();
  wait_issued(ncclAllReduce(bucket.data, bucket.data, bucket.count, ncclFloat32, ncclAvg, comm_, comm_stream_),
              "ncclAllReduce (a bucket: gradients or the step's scalars)");
  pending_ = true;
}

void NcclCommunicator::finish_all_reduces() {
  if (!pending_) return;
  pending_ = false;
  check_async_error("a gradient all-reduce");
  XTRAIN_CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  XTRAIN_CUDA_CHECK(cudaStreamWaitEvent(compute_, comm_done_, 0));
}

float* NcclCommunicator::device_view(float* data, size_t count, bool& staged) {
  cudaPointerAttributes attributes{};
  XTRAIN_CUDA_CHECK(cudaPointerGetAttributes(&attributes, data));
  staged = attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged;
  if (!staged) return data;
  if (count > staging_count_) {  // grows once, to the largest host buffer ever passed
    XTRAIN_CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
    XTRAIN_CUDA_CHECK(cudaFree(staging_));
    staging_ = nullptr;
    staging_count_ = 0;
    XTRAIN_CUDA_CHECK(cudaMalloc(&staging_, count * sizeof(float)));
    staging_count_ = count;
  }
  XTRAIN_CUDA_CHECK(cudaMemcpyAsync(staging_, data, count * sizeof(float), cudaMemcpyHostToDevice, comm_stream_));
  return staging_;
}

void NcclCommunicator::run_blocking(float* data, size_t count, const char* call,
                                    const std::function<ncclResult_t(float*)>& issue) {
  if (count == 0) return;
  order_after_compute();
  bool staged = false;
  float* buffer = device_view(data, count, staged);
  wait_issued(issue(buffer), call);
  if (staged) {
    XTRAIN_CUDA_CHECK(cudaMemcpyAsync(data, buffer, count * sizeof(float), cudaMemcpyDeviceToHost, comm_stream_));
  }
  wait_for_stream(comm_stream_, call);
}

void NcclCommunicator::all_reduce_average(float* data, size_t count) {
  run_blocking(data, count, "ncclAllReduce", [&](float* buffer) {
    return ncclAllReduce(buffer, buffer, count, ncclFloat32, ncclAvg, comm_, comm_stream_);
  });
}

void NcclCommunicator::broadcast(float* data, size_t count, int root) {
  run_blocking(data, count, "ncclBroadcast", [&](float* buffer) {
    return ncclBroadcast(buffer, buffer, count, ncclFloat32, root, comm_, comm_stream_);
  });
}

void NcclCommunicator::barrier() {
  float token = 0.0f;
  all_reduce_average(&token, 1);  // returns once every rank has contributed
}

// The entry point of cuda/cuda_api.hpp (interpret mode's NCCL: cuda/interp/nccl.cpp).
std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend, double init_timeout_s) {
  // A missing or malformed id is reported before anything else (a world of one without an id
  // gets a fresh one in the communicator: asking for it here would start a second bootstrap).
  if (!env.nccl_id_hex.empty() || env.where.world_size > 1) resolve_nccl_id(env);
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) {
    throw std::invalid_argument("the NCCL communicator needs the CUDA backend, not \"" + backend.name() +
                                "\" (use backend gloo for CPU ranks)");
  }
  return std::make_unique<NcclCommunicator>(env, *cuda_backend, init_timeout_s);
}

}  // namespace xtrain::cuda
