// A HostAccess that behaves as a GPU's does, over host buffers standing in for device memory:
// each view is a copy into a buffer of its own that the next view poisons (NaN) first, so a
// caller reading a stale view reads NaN; each store copies out. It records the size of every view
// and store, in order.
#pragma once

#include <cmath>
#include <cstring>
#include <vector>

#include "worker/model/host_access.hpp"

namespace xtrain::test {

class PiecewiseMemory {
 public:
  explicit PiecewiseMemory(size_t piece)
      : access_(
            [this](const float* src, size_t n) {
              std::fill(view_.begin(), view_.end(), std::nanf(""));
              if (view_.size() < n) view_.resize(n);
              std::memcpy(view_.data(), src, n * sizeof(float));
              views.push_back(n);
              return view_.data();
            },
            [this](float* dst, const float* host, size_t n) {
              std::memcpy(dst, host, n * sizeof(float));
              stores.push_back(n);
            },
            piece) {}
  PiecewiseMemory(const PiecewiseMemory&) = delete;
  PiecewiseMemory& operator=(const PiecewiseMemory&) = delete;

  const HostAccess& access() const { return access_; }

  std::vector<size_t> views, stores;  // the floats of each, in order

 private:
  std::vector<float> view_;
  HostAccess access_;
};

}  // namespace xtrain::test
