// OpProfile's clock for the CUDA backend (op_profile.hpp): its calls only queue work on its
// stream, so an operation's time is the device's, between two CUDA events recorded on that
// stream before and after the call. Events are pooled and read at settle(), after the last one
// completed, so timing adds no host wait to the step; the time between an operation's events
// also holds any gap in which the stream ran dry because the host was late with the next kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <utility>
#include <vector>

#include "cuda/check.hpp"
#include "scripts/bench/op_profile.hpp"

namespace xtrain::bench {

class CudaEventClock final : public OpClock {
 public:
  explicit CudaEventClock(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventClock() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaEventClock(const CudaEventClock&) = delete;
  CudaEventClock& operator=(const CudaEventClock&) = delete;

  void begin() override { start_ = record(); }
  void end(std::function<void(double)> done) override { pending_.push_back({start_, record(), std::move(done)}); }
  void settle() override {
    if (pending_.empty()) return;
    XTRAIN_CUDA_CHECK(cudaEventSynchronize(events_[pending_.back().stop]));  // the stream's last
    for (Pending& p : pending_) {
      float ms = 0.0f;
      XTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[p.start], events_[p.stop]));
      p.done(ms);
    }
    pending_.clear();
    used_ = 0;
  }

 private:
  struct Pending {
    size_t start, stop;
    std::function<void(double)> done;
  };

  size_t record() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      XTRAIN_CUDA_CHECK(cudaEventCreate(&e));
      events_.push_back(e);
    }
    XTRAIN_CUDA_CHECK(cudaEventRecord(events_[used_], stream_));
    return used_++;
  }

  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  size_t used_ = 0, start_ = 0;
  std::vector<Pending> pending_;
};

}  // namespace xtrain::bench
