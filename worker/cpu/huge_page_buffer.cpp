#include "worker/cpu/huge_page_buffer.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace xtrain {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

HugePageBuffer::HugePageBuffer(size_t floats) : size_(floats) {
  const size_t bytes = (std::max<size_t>(floats * sizeof(float), 1) + kHugePage - 1) / kHugePage * kHugePage;
  data_ = static_cast<float*>(std::aligned_alloc(kHugePage, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  // Advice before the first touch, so the pages are huge from the start; refused advice (no THP)
  // leaves ordinary pages, which work the same, only slower.
  madvise(data_, bytes, MADV_HUGEPAGE);
  std::memset(data_, 0, bytes);
}

HugePageBuffer::~HugePageBuffer() { std::free(data_); }

}  // namespace xtrain
