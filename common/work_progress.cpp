#include "common/work_progress.hpp"

#include <algorithm>
#include <utility>

namespace xtrain {
namespace {

thread_local WorkProgress* t_progress = nullptr;  // the innermost WorkProgress of this thread

}  // namespace

WorkProgress::WorkProgress(std::function<void()> hook, std::uint64_t every_bytes)
    : hook_(std::move(hook)), every_bytes_(std::max<std::uint64_t>(every_bytes, 1)), outer_(t_progress) {
  t_progress = this;
}

WorkProgress::~WorkProgress() { t_progress = outer_; }

void WorkProgress::advance(std::uint64_t bytes) {
  WorkProgress* p = t_progress;
  if (p == nullptr) return;
  p->pending_ += bytes;
  if (p->pending_ < p->every_bytes_) return;
  p->pending_ %= p->every_bytes_;
  p->hook_();
}

}  // namespace xtrain
