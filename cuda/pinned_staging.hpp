// Pinned host buffers for the small copies of a step (tokens, targets, the losses, the norm, the
// step's scalars). From pageable memory cudaMemcpyAsync stages through the driver's own buffer and
// may block the host until the copy is done; from pinned memory (cudaHostAlloc) it is a DMA that
// returns at once. Buffers form a ring, each with an event recorded after the copy that uses it:
// a buffer is handed out again only once its event says that copy is done (cudaEventQuery, which
// never waits), and if none is, the ring grows by one. So the host neither waits here nor
// overwrites a buffer that a copy in flight still reads; the ring settles at the most copies in
// flight at once (two per micro-step: tokens and targets) within a few steps, and past
// kMaxBuffers it drains the stream (`drain`, the backend's host wait) instead of growing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

namespace xtrain::cuda {

class PinnedStaging {
 public:
  // Larger copies stay pageable. Checkpoints cross in pieces of this size (HostAccess::kPiece).
  static constexpr size_t kMaxBytes = size_t{4} << 20;
  static constexpr size_t kMaxBuffers = 64;

  PinnedStaging(cudaStream_t stream, std::function<void()> drain) : stream_(stream), drain_(std::move(drain)) {}
  ~PinnedStaging();
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  // Calls `copy(buffer)` with a pinned buffer of at least `bytes` (<= kMaxBytes) that no copy in
  // flight uses; `copy` issues its cudaMemcpyAsync on the stream. The buffer is the copy's until
  // the event recorded after it completes. Returns the buffer: after a download, the host reads
  // it once it has waited for the stream.
  void* use(size_t bytes, const std::function<void(void*)>& copy);

  size_t buffers() const { return ring_.size(); }  // for the tests

 private:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    cudaEvent_t done = nullptr;  // recorded after the last copy that used it
  };
  Buffer& free_buffer(size_t bytes);

  cudaStream_t stream_;
  std::function<void()> drain_;
  std::vector<Buffer> ring_;
  size_t next_ = 0;  // where the search for a free buffer starts: the oldest use
};

}  // namespace xtrain::cuda
