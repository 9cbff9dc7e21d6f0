// Data-parallel collectives, implemented with Gloo for CPU ranks (worker/) and NCCL for GPUs
// (cuda/). Buffers live where the backend keeps its tensors (host for CPU, device for CUDA).
#pragma once

#include <cstddef>
#include <string>

namespace xtrain {

// One span of the flat gradient buffer, all-reduced as a unit as soon as backward has finished
// writing it (one transformer layer, or the embeddings).
struct GradBucket {
  float* data = nullptr;
  size_t count = 0;
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
};

}  // namespace xtrain
