// Interpret mode's NCCL (include/nccl.h): a world of one rank. Its collectives are the identity
// on the rank's own data (the sum, average, minimum or maximum of one value is that value), done
// as a copy queued on the caller's stream, so they are ordered with the backend's work as NCCL's
// kernels are. Non-blocking communicators (config.blocking 0) return ncclInProgress from init and
// finalize and report completion at the next ncclCommGetAsyncError, as NCCL's do some time later.
// A world of more ranks never completes its init: its peers are not there.
#include <nccl.h>

#include <cstring>
#include <random>
#include <string>

#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/stream_work.hpp"

struct ncclComm {
  int nranks = 1;
  int rank = 0;
  bool blocking = true;
  ncclResult_t state = ncclSuccess;  // what ncclCommGetAsyncError reports
  bool settles = false;              // an operation in progress completes at the next poll
  std::string last_error;
};

namespace {

std::string& global_last_error() {
  static std::string text;
  return text;
}

ncclResult_t refuse(ncclComm_t comm, ncclResult_t code, const std::string& why) {
  (comm != nullptr ? comm->last_error : global_last_error()) = "interpret mode: " + why;
  return code;
}

// Starts an operation that a non-blocking communicator finishes asynchronously.
ncclResult_t started(ncclComm_t comm) {
  if (comm->blocking) return ncclSuccess;
  comm->state = ncclInProgress;
  comm->settles = true;
  return ncclInProgress;
}

ncclResult_t identity_collective(const char* call, const void* send, void* recv, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, std::string(call) + " of a null communicator");
  if (comm->state != ncclSuccess) {
    return refuse(comm, ncclInvalidUsage, std::string(call) + " on a communicator whose init has not completed");
  }
  if (datatype != ncclFloat32) return refuse(comm, ncclInvalidArgument, std::string(call) + ": ncclFloat32 only");
  const size_t bytes = count * sizeof(float);
  if (bytes == 0) return ncclSuccess;
  if (!xtrain::interp::is_device_range(send, bytes) || !xtrain::interp::is_device_range(recv, bytes)) {
    return refuse(comm, ncclInvalidArgument, std::string(call) + ": buffers must be device memory");
  }
  const cudaError_t e = xtrain::interp::enqueue(stream, call, [send, recv, bytes] {
    if (send != recv) std::memmove(recv, send, bytes);
  });
  if (e != cudaSuccess) return refuse(comm, ncclUnhandledCudaError, std::string(call) + ": the stream refused it");
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::random_device random;
  for (char& c : id->internal) c = static_cast<char>(random());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return refuse(nullptr, ncclInvalidArgument,
                  "rank " + std::to_string(rank) + " of a world of " + std::to_string(nranks));
  }
  auto* c = new ncclComm;
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = config == nullptr || config->blocking != 0;
  *comm = c;
  if (nranks > 1) {
    c->state = ncclInProgress;
    refuse(c, ncclInProgress, "NCCL runs a world of one here: rank " + std::to_string(rank) + " of " +
                                  std::to_string(nranks) + " waits for peers that never come");
    return ncclInProgress;
  }
  return started(c);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError of a null communicator");
  *state = comm->state;
  if (comm->settles) {
    comm->settles = false;
    comm->state = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, "ncclCommFinalize of a null communicator");
  return started(comm);
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;
  return ncclSuccess;
}

// Nothing of a world of one is ever in flight outside the streams: aborting is destroying.
ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  return (comm != nullptr ? comm->last_error : global_last_error()).c_str();
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                           ncclComm_t comm, cudaStream_t stream) {
  return identity_collective("ncclAllReduce", sendbuff, recvbuff, count, datatype, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (comm != nullptr && root != 0) {
    return refuse(comm, ncclInvalidArgument, "ncclBroadcast from a rank that is not there");
  }
  return identity_collective("ncclBroadcast", sendbuff, recvbuff, count, datatype, comm, stream);
}
