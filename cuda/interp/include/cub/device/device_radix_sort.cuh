// Interpret mode (cuda/interp/): cub::DeviceRadixSort::SortKeys on the CPU, for the unsigned
// integer keys the backend sorts (cuda/kernels/embedding.cuh: unsigned long long). CUB's contract:
// a call with d_temp_storage == nullptr only reports the temporary storage it needs; a later call
// with less than that is cudaErrorInvalidValue; keys are ordered by their bits [begin_bit,
// end_bit) alone, stably (equal sort bits keep their input order), whole keys written out; the
// sort is work on the stream. Signed and floating-point keys (CUB reorders their bits first) are
// not emulated.
//
// What it asks for: an alternate key buffer (a least-significant-digit radix sort moves the keys
// between it and d_keys_out, 8 bits a pass), one 256-bucket histogram, and 255 bytes to align
// the start to 256 as CUB does. For n keys of 8 bytes that is aligned256(8 n) + 2048 + 255 bytes,
// inside worker/model/cuda_buffers.hpp's embedding_sort_allowance_bytes(n) = aligned256(8 n) + 8 MiB.
// The sort writes both parts, as a GPU's would, so scratch shared with live data shows up here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/stream_work.hpp"
#include "driver_types.h"

namespace xtrain::interp {

// Why this thread's last refused SortKeys was refused (CUB itself only returns the error code).
inline thread_local std::string t_sort_detail;
inline const std::string& last_sort_detail() { return t_sort_detail; }

namespace radix {

constexpr int kDigitBits = 8;
constexpr size_t kBuckets = size_t{1} << kDigitBits;
constexpr size_t kAlign = 256;

inline size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

template <class Key>
size_t temp_bytes(size_t n) {
  return (kAlign - 1) + aligned(n * sizeof(Key)) + kBuckets * sizeof(size_t);
}

inline bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

inline cudaError_t refuse(const std::string& why) {
  t_sort_detail = "cub::DeviceRadixSort::SortKeys: " + why;
  return cudaErrorInvalidValue;
}

// Least-significant digit first, each pass a stable counting sort on one digit, so the whole is
// stable on bits [begin, end). The passes alternate between `alt` and `out`, arranged so that the
// last one writes `out`.
template <class Key>
void sort(const Key* in, Key* out, Key* alt, size_t* histogram /* (kBuckets) */, size_t n, int begin, int end) {
  const int passes = (end - begin + kDigitBits - 1) / kDigitBits;
  if (passes == 0) {
    std::memcpy(out, in, n * sizeof(Key));
    return;
  }
  const Key* src = in;
  for (int pass = 0; pass < passes; ++pass) {
    Key* dst = (passes - 1 - pass) % 2 == 0 ? out : alt;
    const int shift = begin + pass * kDigitBits;
    const int width = end - shift < kDigitBits ? end - shift : kDigitBits;
    const Key mask = static_cast<Key>((Key{1} << width) - 1);
    std::memset(histogram, 0, kBuckets * sizeof(size_t));
    for (size_t i = 0; i < n; ++i) ++histogram[(src[i] >> shift) & mask];
    size_t start = 0;  // the histogram becomes each bucket's first position
    for (size_t b = 0; b < kBuckets; ++b) {
      const size_t count = histogram[b];
      histogram[b] = start;
      start += count;
    }
    for (size_t i = 0; i < n; ++i) dst[histogram[(src[i] >> shift) & mask]++] = src[i];
    src = dst;
  }
}

}  // namespace radix
}  // namespace xtrain::interp

namespace cub {

struct DeviceRadixSort {
  template <typename KeyT, typename NumItemsT>
  static cudaError_t SortKeys(void* d_temp_storage, size_t& temp_storage_bytes, const KeyT* d_keys_in,
                              KeyT* d_keys_out, NumItemsT num_items, int begin_bit = 0,
                              int end_bit = static_cast<int>(sizeof(KeyT) * 8), cudaStream_t stream = nullptr) {
    static_assert(std::is_integral_v<KeyT> && std::is_unsigned_v<KeyT>,
                  "interpret mode sorts unsigned integer keys only");
    namespace radix = xtrain::interp::radix;
    if constexpr (std::is_signed_v<NumItemsT>) {
      if (num_items < 0) return radix::refuse("num_items " + std::to_string(num_items) + " < 0");
    }
    const auto n = static_cast<size_t>(num_items);
    const size_t needed = radix::temp_bytes<KeyT>(n);
    if (d_temp_storage == nullptr) {
      temp_storage_bytes = needed;
      return cudaSuccess;
    }
    constexpr int kBits = static_cast<int>(sizeof(KeyT) * 8);
    if (begin_bit < 0 || begin_bit > end_bit || end_bit > kBits) {
      return radix::refuse("bits [" + std::to_string(begin_bit) + ", " + std::to_string(end_bit) +
                           ") are not a range within the key's " + std::to_string(kBits));
    }
    if (temp_storage_bytes < needed) {
      return radix::refuse("temporary storage of " + std::to_string(temp_storage_bytes) + " bytes, " +
                           std::to_string(needed) + " needed");
    }
    const size_t key_bytes = n * sizeof(KeyT);
    const bool device = key_bytes == 0 || (xtrain::interp::is_device_range(d_keys_in, key_bytes) &&
                                           xtrain::interp::is_device_range(d_keys_out, key_bytes));
    if (!device || !xtrain::interp::is_device_range(d_temp_storage, needed)) {
      return radix::refuse("the keys (" + std::to_string(key_bytes) + " bytes each way) or the temporary storage (" +
                           std::to_string(needed) + " bytes) are not inside device allocations");
    }
    // On a GPU these would race: the emulation, which would not, refuses them instead.
    if (radix::overlap(d_keys_in, key_bytes, d_keys_out, key_bytes) ||
        radix::overlap(d_temp_storage, needed, d_keys_in, key_bytes) ||
        radix::overlap(d_temp_storage, needed, d_keys_out, key_bytes)) {
      return radix::refuse("the input keys, the output keys and the temporary storage overlap");
    }
    const auto base = (reinterpret_cast<std::uintptr_t>(d_temp_storage) + radix::kAlign - 1) / radix::kAlign *
                      radix::kAlign;
    auto* alt = reinterpret_cast<KeyT*>(base);
    auto* histogram = reinterpret_cast<size_t*>(base + radix::aligned(key_bytes));
    return xtrain::interp::enqueue(stream, "cub::DeviceRadixSort::SortKeys", [=] {
      radix::sort(d_keys_in, d_keys_out, alt, histogram, n, begin_bit, end_bit);
    });
  }
};

}  // namespace cub
