#include "worker/cpu/huge_page_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "common/work_progress.hpp"

namespace xtrain {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

void* alloc_huge_pages_zeroed(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice before the first touch, so the pages are huge from the start; refused advice (no THP)
  // leaves ordinary pages, which work the same, only slower.
  madvise(p, rounded, MADV_HUGEPAGE);
  // The first touch is where the memory is had, at 0.3-2 GB/s on the build VMs: a CPU rank's many
  // GB take seconds to tens of seconds, which beat as they go (WorkProgress) for the watchdog.
  constexpr size_t kPiece = 64 * kHugePage;
  for (size_t at = 0; at < rounded; at += kPiece) {
    const size_t n = std::min(kPiece, rounded - at);
    std::memset(static_cast<char*>(p) + at, 0, n);
    WorkProgress::advance(n);
  }
  return p;
}

HugePageBuffer::HugePageBuffer(size_t floats)
    : data_(static_cast<float*>(alloc_huge_pages_zeroed(floats * sizeof(float)))), size_(floats) {}

HugePageBuffer::~HugePageBuffer() { std::free(data_); }

}  // namespace xtrain
