// Floats in memory backed by 2 MiB pages where the kernel gives them (transparent huge pages in
// "madvise" mode, as Debian ships, need the request). Streaming hundreds of MB through 4 KiB pages
// costs a TLB miss per page: one GPT-2 124M token's products ran about 20% slower on them here.
#pragma once

#include <cstddef>

namespace xtrain {

// `bytes` (rounded up to whole 2 MiB pages) of zeroed memory aligned to 2 MiB and advised to be
// backed by huge pages before its first touch; free it with std::free. std::bad_alloc when it
// cannot be had. A first touch costs one fault per 2 MiB instead of 512 (each of which cost about
// 16 us on the build VMs: seconds for GPT-2 124M's buffers), and products over it miss the TLB less.
void* alloc_huge_pages_zeroed(size_t bytes);

class HugePageBuffer {
 public:
  explicit HugePageBuffer(size_t floats);  // zero-filled; std::bad_alloc when it cannot be had
  ~HugePageBuffer();
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  float* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xtrain
