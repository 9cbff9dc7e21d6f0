// Data-parallel collectives, implemented with Gloo for CPU ranks (worker/) and NCCL for GPUs
// (cuda/). Buffers live where the backend keeps its tensors (host for CPU, device for CUDA).
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

namespace xtrain {

// One span of the flat gradient buffer, all-reduced as a unit as soon as backward has finished
// writing it (one transformer layer, or the embeddings).
struct GradBucket {
  float* data = nullptr;
  size_t count = 0;
  int id = -1;  // for progress reports: the layer, or n_layer for the embeddings' span
};

// How long one collective, and any host wait for work ordered after one, may take before the
// peers count as lost (Gloo's op timeout, NCCL's polling waits). Generous because a peer may
// legitimately be busy: rank 0 writing a checkpoint while the others wait at a barrier.
inline constexpr double kCollectiveTimeoutS = 600.0;

// A collective failed: a peer died or stopped answering, or the rendezvous failed. The message is
// one line saying which rank, what it waited for and for how long. Such a failure is the echo of
// a problem elsewhere, and the worker says so in its result file (failure_kind "peer_lost").
class CommunicatorError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;  // "gloo", "nccl", "single"

  // Starts averaging `bucket` across ranks without blocking the caller; buckets complete in
  // submission order. The result must be bitwise identical on every rank.
  virtual void start_all_reduce_average(GradBucket bucket) = 0;
  // Blocks (CPU) or orders the compute stream (CUDA) until every started bucket is done.
  // Rethrows the first failure of a started bucket.
  virtual void finish_all_reduces() = 0;

  // Blocking collectives for small and one-off data.
  virtual void all_reduce_average(float* data, size_t count) = 0;
  virtual void broadcast(float* data, size_t count, int root) = 0;
  virtual void barrier() = 0;

  // Progress reports (worker/train/heartbeat.hpp): where the communication side runs the buckets'
  // all-reduces (Gloo's communication thread), it calls `observer` with a bucket's id when its
  // all-reduce begins and with -1 when it ends. Set before the first bucket; must be cheap.
  void set_bucket_observer(std::function<void(int bucket_id)> observer) { bucket_observer_ = std::move(observer); }

 protected:
  std::function<void(int)> bucket_observer_;
};

}  // namespace xtrain
