#include "cuda/pinned_staging.hpp"

#include <algorithm>

#include "cuda/check.hpp"

namespace xtrain::cuda {
namespace {

// Small copies share a size, so that any buffer serves any of them without reallocating.
constexpr size_t kMinBytes = size_t{64} << 10;

bool copy_done(cudaEvent_t event) {
  const cudaError_t state = cudaEventQuery(event);
  if (state == cudaErrorNotReady) return false;
  XTRAIN_CUDA_CHECK(state);
  return true;
}

}  // namespace

PinnedStaging::~PinnedStaging() {
  // The backend has waited for its stream before: no copy uses these buffers any more.
  for (Buffer& b : ring_) {
    cudaEventDestroy(b.done);
    cudaFreeHost(b.data);
  }
}

PinnedStaging::Buffer& PinnedStaging::free_buffer(size_t bytes) {
  for (size_t i = 0; i < ring_.size(); ++i) {
    Buffer& b = ring_[(next_ + i) % ring_.size()];
    if (!copy_done(b.done)) continue;
    next_ = (next_ + i + 1) % ring_.size();
    if (b.bytes < bytes) {  // a larger copy than any before: its copy is done, so it may go
      XTRAIN_CUDA_CHECK(cudaFreeHost(b.data));
      b.data = nullptr;
      b.bytes = 0;
      XTRAIN_CUDA_CHECK(cudaHostAlloc(&b.data, bytes, cudaHostAllocDefault));
      b.bytes = bytes;
    }
    return b;
  }
  if (ring_.size() >= kMaxBuffers) {
    drain_();  // every copy is done now
    return free_buffer(bytes);
  }
  Buffer b;
  b.bytes = std::max(bytes, kMinBytes);
  XTRAIN_CUDA_CHECK(cudaHostAlloc(&b.data, b.bytes, cudaHostAllocDefault));
  const cudaError_t made = cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming);
  if (made != cudaSuccess) cudaFreeHost(b.data);
  XTRAIN_CUDA_CHECK(made);
  // Inserted before the oldest use, so the search order stays oldest first.
  ring_.insert(ring_.begin() + static_cast<std::ptrdiff_t>(next_), b);
  Buffer& added = ring_[next_];
  next_ = (next_ + 1) % ring_.size();
  return added;
}

void* PinnedStaging::use(size_t bytes, const std::function<void(void*)>& copy) {
  Buffer& b = free_buffer(bytes);
  copy(b.data);
  XTRAIN_CUDA_CHECK(cudaEventRecord(b.done, stream_));
  return b.data;
}

}  // namespace xtrain::cuda
