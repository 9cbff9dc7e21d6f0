// Interpret mode's NCCL (include/nccl.h), between the processes of one machine. The ranks meet
// through files named by their unique id (nccl_exchange.hpp). A collective is two pieces of work
// on the caller's stream, so it is ordered with the backend's work as NCCL's kernels are: the
// first writes this rank's part when the stream reaches it; the second is gated on every rank's
// part and then reduces them in rank order, so every rank gets the same bits. A query of the
// stream says "not ready" while a peer lags; a peer that exited without its part makes the
// communicator's asynchronous error ncclRemoteError, as NCCL's does when a peer dies.
// Non-blocking communicators (config.blocking 0) return ncclInProgress from init and finalize
// and report completion at a later ncclCommGetAsyncError. A world of one needs no peer: its
// collectives are the identity, and its non-blocking calls complete at the next poll.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/gpu/nccl_id.hpp"
#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/nccl_exchange.hpp"
#include "cuda/interp/stream_work.hpp"

namespace {

using xtrain::interp::PeerExchange;

// What a communicator of more than one rank shares with its queued collectives, which may run
// after it is destroyed (they then do nothing, as an aborted NCCL's kernels).
struct CommLink {
  std::unique_ptr<PeerExchange> exchange;  // nullptr once the communicator is gone
  std::uint64_t issued = 0;                // collectives issued so far
  cudaStream_t stream = nullptr;           // the one stream they run on
  ncclResult_t failure = ncclSuccess;      // what a collective found (a lost peer)
  std::string why;
};

}  // namespace

struct ncclComm {
  int nranks = 1;
  int rank = 0;
  bool blocking = true;
  ncclResult_t state = ncclSuccess;  // what ncclCommGetAsyncError reports
  bool joining = false;              // init waits for every rank to join
  bool finalizing = false;           // finalize waits for every rank to finish
  bool finished = false;             // this rank's "finished" is written
  std::shared_ptr<CommLink> link;    // more than one rank
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

// A collective's work that the stream would not take (a capture gone wrong, a sticky error).
ncclResult_t stream_refused(ncclComm_t comm, const char* call) {
  return refuse(comm, ncclUnhandledCudaError, std::string(call) + ": the stream refused it");
}

std::string hex_of(const ncclUniqueId& id) {
  xtrain::NcclIdBytes bytes;
  std::memcpy(bytes.data(), id.internal, bytes.size());
  return xtrain::encode_nccl_id(bytes);
}

// Advances a communicator: its init waits for every rank to join, its finalize for its
// collectives to run here and every rank to finish; a collective's lost peer is its error.
// Failures of the exchange itself (its files) are system errors. A world of one waits for nobody.
void progress(ncclComm& c) {
  if (c.link == nullptr) {
    if (c.joining || c.finalizing) c.state = ncclSuccess;
    c.joining = c.finalizing = false;
    return;
  }
  CommLink& link = *c.link;
  try {
    if (link.failure != ncclSuccess) {
      c.state = link.failure;
      refuse(&c, link.failure, link.why);
    } else if (c.joining && link.exchange->all_joined()) {
      c.joining = false;
      c.state = ncclSuccess;
    } else if (c.finalizing) {
      // A GPU runs the communicator's stream by itself; here it is run as far as peers allow.
      if (link.stream != nullptr && !xtrain::interp::advance_stream(link.stream)) return;
      if (!c.finished) link.exchange->publish("finished", "finished", nullptr, 0);
      c.finished = true;
      std::string why;
      const PeerExchange::Arrival seen = link.exchange->arrival("finished", why);
      if (seen == PeerExchange::Arrival::all) {
        c.finalizing = false;
        c.state = ncclSuccess;
      } else if (seen == PeerExchange::Arrival::lost) {
        link.failure = c.state = ncclRemoteError;
        refuse(&c, ncclRemoteError, link.why = "ncclCommFinalize: " + why);
      }
    }
  } catch (const std::exception& e) {
    c.state = ncclSystemError;
    refuse(&c, ncclSystemError, std::string("the exchange between ranks failed: ") + e.what());
  }
}

// Starts an operation that a non-blocking communicator finishes asynchronously; a blocking one
// waits for it here.
ncclResult_t started(ncclComm_t comm) {
  comm->state = ncclInProgress;
  if (!comm->blocking) return ncclInProgress;
  for (progress(*comm); comm->state == ncclInProgress; progress(*comm)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return comm->state;
}

struct Collective {
  const char* call;
  const void* send;
  void* recv;
  size_t count;
  ncclRedOp_t op;
  int root;  // -1: an all-reduce
};

const char* op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
  }
  return "an unknown operation";
}

// Every rank's parts of an all-reduce, combined in rank order. ncclAvg is NCCL's for floating
// types: each part scaled by 1/nranks, then summed.
void reduce(float* out, const std::vector<std::vector<float>>& parts, size_t count, ncclRedOp_t op) {
  const float scale = 1.0f / static_cast<float>(parts.size());
  for (size_t i = 0; i < count; ++i) {
    float acc = op == ncclAvg ? parts[0][i] * scale : parts[0][i];
    for (size_t r = 1; r < parts.size(); ++r) {
      const float x = parts[r][i];
      switch (op) {
        case ncclSum: acc += x; break;
        case ncclProd: acc *= x; break;
        case ncclMax: acc = std::max(acc, x); break;
        case ncclMin: acc = std::min(acc, x); break;
        case ncclAvg: acc += x * scale; break;
      }
    }
    out[i] = acc;
  }
}

// The two pieces of work of a collective between processes (the header comment says why two).
ncclResult_t exchange_collective(const Collective& c, ncclComm_t comm, cudaStream_t stream) {
  const std::shared_ptr<CommLink> link = comm->link;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone) {
    return refuse(comm, ncclInvalidUsage,
                  std::string(c.call) + ": interpret mode does not capture collectives between processes");
  }
  if (link->stream == nullptr) link->stream = stream;
  if (link->stream != stream) {
    return refuse(comm, ncclInvalidUsage,
                  std::string(c.call) + " on a second stream: interpret mode runs a communicator's collectives on one");
  }
  const std::uint64_t index = link->issued++;
  const std::string part = PeerExchange::part_name(index);
  const std::string what = "collective " + std::to_string(index) + ": " + c.call + " of " + std::to_string(c.count) +
                           " float32 values" +
                           (c.root < 0 ? std::string(" (") + op_name(c.op) + ")"
                                       : " from rank " + std::to_string(c.root));
  const size_t bytes = c.count * sizeof(float);
  const size_t sent = c.root < 0 || c.root == comm->rank ? bytes : 0;  // a broadcast's other ranks send no data
  const int nranks = comm->nranks;
  const cudaError_t published = xtrain::interp::enqueue(stream, c.call, [link, part, what, send = c.send, sent] {
    if (link->exchange != nullptr) link->exchange->publish(part, what, send, sent);
  });
  if (published != cudaSuccess) {
    return stream_refused(comm, c.call);
  }
  auto gate = [link, part, call = std::string(c.call)]() -> xtrain::interp::GateState {
    if (link->exchange == nullptr) return {};
    if (link->failure != ncclSuccess) return {false, link->why};
    std::string why;
    const PeerExchange::Arrival seen = link->exchange->arrival(part, why);
    if (seen == PeerExchange::Arrival::lost) {
      link->failure = ncclRemoteError;
      link->why = call + ": " + why;
      return {false, link->why};
    }
    return {seen == PeerExchange::Arrival::all, ""};
  };
  auto combine = [link, index, part, what, c, nranks, bytes] {
    if (link->exchange == nullptr) return;  // aborted
    std::vector<std::vector<float>> parts;
    for (int r = 0; r < nranks; ++r) {
      const std::vector<std::uint8_t> data = link->exchange->read(part, r, what);
      const size_t expected = c.root < 0 || c.root == r ? bytes : 0;
      if (data.size() != expected) {
        throw std::runtime_error("rank " + std::to_string(r) + "'s " + part + " holds " + std::to_string(data.size()) +
                                 " bytes of data, not " + std::to_string(expected));
      }
      parts.emplace_back(data.size() / sizeof(float));
      std::memcpy(parts.back().data(), data.data(), data.size());
    }
    auto* out = static_cast<float*>(c.recv);
    if (c.root >= 0) {
      std::memcpy(out, parts[static_cast<size_t>(c.root)].data(), bytes);
    } else {
      reduce(out, parts, c.count, c.op);
    }
    // Every rank has written this part, so every rank has run its collective before: its own
    // part of that one has been read by all (a communicator's collectives run on one stream).
    if (index > 0) link->exchange->forget(PeerExchange::part_name(index - 1));
  };
  if (xtrain::interp::enqueue_gated(stream, c.call, gate, combine) != cudaSuccess) {
    return stream_refused(comm, c.call);
  }
  return ncclSuccess;
}

ncclResult_t collective(const Collective& c, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, std::string(c.call) + " of a null communicator");
  if (comm->state != ncclSuccess) {
    return refuse(comm, ncclInvalidUsage, std::string(c.call) + " on a communicator that is not ready (" +
                                              ncclGetErrorString(comm->state) + ")");
  }
  if (datatype != ncclFloat32) return refuse(comm, ncclInvalidArgument, std::string(c.call) + ": ncclFloat32 only");
  if (c.root >= comm->nranks) {
    return refuse(comm, ncclInvalidArgument, std::string(c.call) + " from rank " + std::to_string(c.root) +
                                                 ", which is not in a world of " + std::to_string(comm->nranks));
  }
  const size_t bytes = c.count * sizeof(float);
  if (bytes == 0) return ncclSuccess;
  if (!xtrain::interp::is_device_range(c.send, bytes) || !xtrain::interp::is_device_range(c.recv, bytes)) {
    return refuse(comm, ncclInvalidArgument, std::string(c.call) + ": buffers must be device memory");
  }
  if (comm->link != nullptr) return exchange_collective(c, comm, stream);
  const cudaError_t e = xtrain::interp::enqueue(stream, c.call, [send = c.send, recv = c.recv, bytes] {
    if (send != recv) std::memmove(recv, send, bytes);  // the identity of one rank
  });
  if (e != cudaSuccess) return stream_refused(comm, c.call);
  return ncclSuccess;
}

}  // namespace

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  const xtrain::NcclIdBytes bytes = xtrain::random_nccl_id();
  std::memcpy(id->internal, bytes.data(), bytes.size());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return refuse(nullptr, ncclInvalidArgument,
                  "rank " + std::to_string(rank) + " of a world of " + std::to_string(nranks));
  }
  auto c = std::make_unique<ncclComm>();
  c->nranks = nranks;
  c->rank = rank;
  c->blocking = config == nullptr || config->blocking != 0;
  if (nranks > 1) {
    try {
      c->link = std::make_shared<CommLink>();
      c->link->exchange = std::make_unique<PeerExchange>(hex_of(id), rank, nranks);
    } catch (const std::exception& e) {
      return refuse(nullptr, ncclSystemError, std::string("rank ") + std::to_string(rank) + " could not join: " + e.what());
    }
  }
  c->joining = true;
  *comm = c.release();
  return started(*comm);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, "ncclCommGetAsyncError of a null communicator");
  progress(*comm);
  *state = comm->state;
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return refuse(nullptr, ncclInvalidArgument, "ncclCommFinalize of a null communicator");
  comm->finalizing = true;
  return started(comm);
}

// Leaves the exchange now: collectives still queued do nothing when they run (as an aborted
// NCCL's kernels end), and the peers see this rank as gone once its process exits.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr && comm->link != nullptr) comm->link->exchange.reset();
  delete comm;
  return ncclSuccess;
}

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

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return collective({"ncclAllReduce", sendbuff, recvbuff, count, op, -1}, datatype, comm, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (root < 0) return refuse(comm, ncclInvalidArgument, "ncclBroadcast from rank " + std::to_string(root));
  return collective({"ncclBroadcast", sendbuff, recvbuff, count, ncclSum, root}, datatype, comm, stream);
}
