#include "worker/model/host_access.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "common/work_progress.hpp"
#include "worker/model/backend.hpp"

namespace xtrain {

HostAccess::HostAccess(View view, Store store, size_t piece)
    : view_(std::move(view)), store_(std::move(store)), piece_(piece) {
  if (!view_ || !store_ || piece_ == 0) throw std::logic_error("HostAccess: a view, a store and a piece size");
}

void HostAccess::read(const float* src, size_t count,
                      const std::function<void(const float* host, size_t offset, size_t n)>& take) const {
  if (in_place()) return take(src, 0, count);
  for (size_t offset = 0; offset < count; offset += piece_) {
    const size_t n = std::min(piece_, count - offset);
    take(view_(src + offset, n), offset, n);
  }
}

const float* HostAccess::whole(const float* src, size_t count) const {
  return in_place() ? src : view_(src, count);
}

void HostAccess::fill(float* dst, size_t count,
                      const std::function<void(float* host, size_t offset, size_t n)>& fill) const {
  if (in_place()) {
    fill(dst, 0, count);
    return WorkProgress::advance(count * sizeof(float));
  }
  for (size_t offset = 0; offset < count; offset += piece_) {
    const size_t n = std::min(piece_, count - offset);
    if (staging_.size() < n) staging_.resize(n);
    fill(staging_.data(), offset, n);
    store_(dst + offset, staging_.data(), n);
    WorkProgress::advance(n * sizeof(float));
  }
}

void HostAccess::fill_whole(float* dst, size_t count, const std::function<void(float* host)>& fill) const {
  if (in_place()) {
    fill(dst);
  } else {
    if (staging_.size() < count) staging_.resize(count);
    fill(staging_.data());
    store_(dst, staging_.data(), count);
  }
  WorkProgress::advance(count * sizeof(float));
}

HostAccess host_access(Backend& backend) {
  if (backend.host_reads_in_place()) {
    backend.synchronize();
    return {};
  }
  return HostAccess(
      [&backend](const float* src, size_t n) {
        return static_cast<const float*>(backend.download_view(ConstActPtr(src), n));
      },
      [&backend](float* dst, const float* host, size_t n) { backend.upload(dst, host, n); });
}

}  // namespace xtrain
