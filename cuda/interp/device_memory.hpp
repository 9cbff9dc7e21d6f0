// Interpret mode's device memory: host memory in one reserved range of the address space, so an
// address says at once whether it is device memory. Every allocation starts on a page and is
// followed by at least one page that is never mapped (a stray host access faults there); a freed
// allocation's pages are unmapped and its addresses never reused, so a kernel (checked by the
// access hooks) or the host touching freed memory is caught.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace xtrain::interp {

// True when [p, p + bytes) lies inside one live device allocation (cudaMalloc'd, not freed).
bool is_device_range(const void* p, size_t bytes);
namespace detail {
inline constexpr size_t kDeviceSpaceBytes = 1ull << 40;  // address space only: pages are mapped when allocated
extern const unsigned char* device_space_base;          // set when the library loads
}  // namespace detail

// True when p is inside the reserved range (live, freed, or between allocations). Inline: the
// access checks ask it for every load and store.
inline bool in_device_space(const void* p) {
  const auto* b = static_cast<const unsigned char*>(p);
  return detail::device_space_base != nullptr && b >= detail::device_space_base &&
         b < detail::device_space_base + detail::kDeviceSpaceBytes;
}
// The live allocation holding p as [lo, hi); false when there is none.
bool device_allocation_of(const void* p, uintptr_t& lo, uintptr_t& hi);
// Why [p, p + bytes) is not inside one live allocation, naming the nearest one; empty if it is.
std::string describe_bad_device_range(const void* p, size_t bytes);

// nullptr when the (emulated) device's memory is exhausted.
void* device_allocate(size_t bytes);
// False when p is not the start of a live allocation.
bool device_free(void* p);
void device_free_all();
size_t device_allocated_bytes();
// The emulated device's memory, which interpret mode reports: an H200's (140.4 GiB), or
// XTRAIN_INTERP_DEVICE_MIB MiB (common/cuda_interpret.hpp; tests of what a smaller GPU
// refuses). The host may have much less: an allocation the host cannot back fails as an
// out-of-memory would.
size_t device_memory_bytes();

// The device pages a kernel writes, with their contents from before it, so that the launch can
// be undone and run again under another schedule, and the runs' results compared.
//
// Results must be bitwise equal, except floats that atomic adds wrote: fp32 addition is not
// associative, and atomics land in no fixed order on a GPU either (a non-deterministic dQ sums
// this way). Such a word may differ by at most what reordering its sum can make: with n adds,
// the value it started from and the added values of total magnitude M (the start counted in), any
// two orders agree within 2 (n + 1) 2^-24 M (the standard bound on a recursive sum, twice). A race
// that loses or repeats an add, or a plain store racing with the adds, breaks that bound unless it
// moves the word by less than its rounding.
class WriteJournal {
 public:
  static constexpr size_t kPage = 4096;
  // Before a write to [p, p + bytes): keep the pages' current contents unless kept already.
  void before_write(const void* p, size_t bytes);
  // After an atomic add of v to the float at p, which held `before`, in this run.
  void float_add(const float* p, float before, float v);
  // The pages written so far with their contents now.
  std::unordered_map<uintptr_t, std::vector<unsigned char>> current() const;
  // Puts every kept page back as it was before the first run, for the next run (whose float adds
  // are recorded afresh).
  void restore();
  // The first difference between the pages' contents now and `expected` (pages missing from it
  // are compared with their contents before the first run) beyond the float adds' bound; empty
  // when there is none.
  std::string first_difference(const std::unordered_map<uintptr_t, std::vector<unsigned char>>& expected) const;

 private:
  struct FloatAdds {
    unsigned count = 0;
    double magnitude = 0;  // |the value before the first add| + the sum of |v|
    // Empty when `now` and `want`, this word's values in two runs, are within what reordering the
    // adds can make; else what is wrong, to follow the byte's place in a message.
    std::string excess(float now, float want) const;
  };
  std::unordered_map<uintptr_t, std::vector<unsigned char>> before_;
  std::unordered_map<uintptr_t, FloatAdds> adds_;  // by the float's address, this run's
};

}  // namespace xtrain::interp
