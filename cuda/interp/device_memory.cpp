#include "cuda/interp/device_memory.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

#include "common/cuda_interpret.hpp"

namespace xtrain::interp {

const unsigned char* detail::device_space_base = nullptr;

namespace {

constexpr size_t kReservedBytes = detail::kDeviceSpaceBytes;
static_assert(kMaxInterpDeviceMib << 20 <= kReservedBytes, "the largest emulated memory must fit the reserved space");
constexpr size_t kPage = 4096;

struct DeviceSpace {
  std::mutex mutex;
  unsigned char* base = nullptr;
  size_t next = 0;                        // bump offset: addresses are never reused
  std::map<uintptr_t, size_t> live;       // start -> bytes
  size_t allocated = 0;

  DeviceSpace() {
    void* p = mmap(nullptr, kReservedBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) base = static_cast<unsigned char*>(p);
    detail::device_space_base = base;
  }
};

// Made when the library loads, before any allocation: no guard to test on every access check.
DeviceSpace g_space;
DeviceSpace& space() { return g_space; }

size_t pages_for(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// The live allocation holding p, or live.end(). Caller holds the mutex.
std::map<uintptr_t, size_t>::const_iterator holder(const DeviceSpace& s, uintptr_t p) {
  auto it = s.live.upper_bound(p);
  if (it == s.live.begin()) return s.live.end();
  --it;
  return p < it->first + it->second ? it : s.live.end();
}

}  // namespace

bool is_device_range(const void* p, size_t bytes) {
  DeviceSpace& s = space();
  std::lock_guard lock(s.mutex);
  const auto a = reinterpret_cast<uintptr_t>(p);
  const auto it = holder(s, a);
  return it != s.live.end() && a + bytes <= it->first + it->second;
}

bool device_allocation_of(const void* p, uintptr_t& lo, uintptr_t& hi) {
  DeviceSpace& s = space();
  std::lock_guard lock(s.mutex);
  const auto it = holder(s, reinterpret_cast<uintptr_t>(p));
  if (it == s.live.end()) return false;
  lo = it->first;
  hi = it->first + it->second;
  return true;
}

std::string describe_bad_device_range(const void* p, size_t bytes) {
  DeviceSpace& s = space();
  std::lock_guard lock(s.mutex);
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = holder(s, a);
  if (it != s.live.end()) {
    if (a + bytes <= it->first + it->second) return {};
    return std::to_string(bytes) + " bytes at offset " + std::to_string(a - it->first) + " of an allocation of " +
           std::to_string(it->second) + " bytes run past its end";
  }
  if (!in_device_space(p)) return "address " + std::to_string(a) + " is not device memory";
  auto after = s.live.upper_bound(a);
  if (after == s.live.begin()) return "address is before every live device allocation";
  --after;
  return "address is " + std::to_string(a - (after->first + after->second)) + " bytes past the end of an allocation of " +
         std::to_string(after->second) + " bytes (or in one that was freed)";
}

size_t device_memory_bytes() {
  static const size_t bytes = interpret_settings().device_mib << 20;
  return bytes;
}

void* device_allocate(size_t bytes) {
  DeviceSpace& s = space();
  std::lock_guard lock(s.mutex);
  if (s.base == nullptr || bytes > device_memory_bytes() - s.allocated) return nullptr;
  const size_t mapped = pages_for(bytes == 0 ? 1 : bytes);
  if (s.next + mapped + kPage > kReservedBytes) return nullptr;
  unsigned char* p = s.base + s.next;
  if (mprotect(p, mapped, PROT_READ | PROT_WRITE) != 0) return nullptr;
  s.next += mapped + kPage;  // the guard page stays PROT_NONE
  s.live[reinterpret_cast<uintptr_t>(p)] = bytes;
  s.allocated += bytes;
  return p;
}

bool device_free(void* p) {
  DeviceSpace& s = space();
  std::lock_guard lock(s.mutex);
  const auto it = s.live.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.live.end()) return false;
  const size_t mapped = pages_for(it->second == 0 ? 1 : it->second);
  madvise(p, mapped, MADV_DONTNEED);
  mprotect(p, mapped, PROT_NONE);
  s.allocated -= it->second;
  s.live.erase(it);
  return true;
}

void device_free_all() {
  std::vector<void*> all;
  {
    std::lock_guard lock(space().mutex);
    for (const auto& [start, bytes] : space().live) all.push_back(reinterpret_cast<void*>(start));
  }
  for (void* p : all) device_free(p);
}

size_t device_allocated_bytes() {
  std::lock_guard lock(space().mutex);
  return space().allocated;
}

// ---- WriteJournal ----------------------------------------------------------------------------

void WriteJournal::before_write(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t page = a / kPage * kPage; page < a + bytes; page += kPage) {
    auto [it, fresh] = before_.try_emplace(page);
    if (fresh) it->second.assign(reinterpret_cast<const unsigned char*>(page),
                                 reinterpret_cast<const unsigned char*>(page) + kPage);
  }
}

std::unordered_map<uintptr_t, std::vector<unsigned char>> WriteJournal::current() const {
  std::unordered_map<uintptr_t, std::vector<unsigned char>> now;
  for (const auto& [page, old] : before_) {
    now[page].assign(reinterpret_cast<const unsigned char*>(page), reinterpret_cast<const unsigned char*>(page) + kPage);
  }
  return now;
}

void WriteJournal::float_add(const float* p, float before, float v) {
  auto [it, fresh] = adds_.try_emplace(reinterpret_cast<uintptr_t>(p));
  if (fresh) it->second.magnitude = std::fabs(static_cast<double>(before));
  ++it->second.count;
  it->second.magnitude += std::fabs(static_cast<double>(v));
}

void WriteJournal::restore() {
  for (const auto& [page, old] : before_) std::memcpy(reinterpret_cast<void*>(page), old.data(), kPage);
  adds_.clear();
}

std::string WriteJournal::FloatAdds::excess(float now, float want) const {
  const double bound = 2.0 * (count + 1) * 0x1p-24 * magnitude;
  const double apart = std::fabs(static_cast<double>(now) - static_cast<double>(want));
  if (apart <= bound) return {};
  char text[200];
  std::snprintf(text, sizeof text,
                " (a float %u atomic adds wrote: %.9g against %.9g, more apart than their order can make, %.3g)", count,
                static_cast<double>(now), static_cast<double>(want), bound);
  return text;
}

std::string WriteJournal::first_difference(
    const std::unordered_map<uintptr_t, std::vector<unsigned char>>& expected) const {
  std::map<uintptr_t, const std::vector<unsigned char>*> ordered;  // report the lowest address
  for (const auto& [page, old] : before_) {
    const auto e = expected.find(page);
    ordered[page] = e != expected.end() ? &e->second : &old;
  }
  for (const auto& [page, want] : ordered) {
    const auto* now = reinterpret_cast<const unsigned char*>(page);
    for (size_t i = 0; i < kPage; ++i) {
      if (now[i] == (*want)[i]) continue;
      uintptr_t lo = 0, hi = 0;
      if (!device_allocation_of(now + i, lo, hi)) return "a byte outside every live allocation";
      const std::string where =
          "byte " + std::to_string(page + i - lo) + " of an allocation of " + std::to_string(hi - lo) + " bytes";
      const size_t word = i / sizeof(float) * sizeof(float);
      const auto added = adds_.find(page + word);
      if (added == adds_.end()) return where;
      float a = 0, b = 0;
      std::memcpy(&a, now + word, sizeof a);
      std::memcpy(&b, want->data() + word, sizeof b);
      if (const std::string excess = added->second.excess(a, b); !excess.empty()) return where + excess;
      i = word + sizeof(float) - 1;  // the rest of this float is within its bound
    }
  }
  return {};
}

}  // namespace xtrain::interp
