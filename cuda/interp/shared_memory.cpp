#include "cuda/interp/shared_memory.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace xtrain::interp {
namespace {

// Room for the largest dynamic allocation plus every declaration a kernel may make, each with
// its red zones.
constexpr size_t kArenaBytes = kSharedOptinLimit + 64 * 1024;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

SharedArena::SharedArena() : storage_(kArenaBytes), shadow_(kArenaBytes) {}

void SharedArena::begin_launch(size_t dynamic_bytes, int threads_per_block) {
  regions_.assign(1, Region{"dynamic shared memory", kRedZone, dynamic_bytes});
  end_ = round_up(kRedZone + dynamic_bytes, 16) + kRedZone;
  static_bytes_ = 0;
  next_declaration_.assign(static_cast<size_t>(threads_per_block), 0);
}

void SharedArena::begin_block() {
  ++block_;
  barriers_ = 0;
  std::fill(next_declaration_.begin(), next_declaration_.end(), 0);
  std::memset(base(), 0xFF, end_);
}

void* SharedArena::declare(int thread, const char* name, size_t bytes, size_t align) {
  const int k = next_declaration_[static_cast<size_t>(thread)]++;
  const size_t index = static_cast<size_t>(k) + 1;  // regions_[0] is the dynamic memory
  if (index < regions_.size()) {
    const Region& r = regions_[index];
    if (r.name != name || r.bytes != bytes) {
      throw std::runtime_error("__shared__ declaration " + std::to_string(k) + " is \"" + name + "\" (" +
                               std::to_string(bytes) + " bytes) in this thread but \"" + r.name + "\" (" +
                               std::to_string(r.bytes) + " bytes) in another: declarations in divergent code");
    }
    return base() + r.offset;
  }
  if (static_bytes_ + bytes > kStaticSharedLimit) {
    throw std::runtime_error("static __shared__ memory over 48 KiB (\"" + std::string(name) +
                             "\" brings it to " + std::to_string(static_bytes_ + bytes) +
                             " bytes): larger tiles need dynamic shared memory");
  }
  if (static_bytes_ + bytes + regions_[0].bytes > kSharedOptinLimit) {
    throw std::runtime_error("static plus dynamic shared memory over the device's 227 KiB per block (\"" +
                             std::string(name) + "\")");
  }
  const size_t offset = round_up(end_, std::max<size_t>(align, 16));
  if (offset + bytes + kRedZone > storage_.size()) throw std::runtime_error("shared memory arena exhausted");
  regions_.push_back(Region{name, offset, bytes});
  std::memset(base() + offset, 0xFF, bytes);
  end_ = round_up(offset + bytes, 16) + kRedZone;
  static_bytes_ += bytes;
  return base() + offset;
}

const SharedArena::Region* SharedArena::region_of(size_t offset) const {
  for (const Region& r : regions_) {
    if (offset >= r.offset && offset < r.offset + r.bytes) return &r;
  }
  return nullptr;
}

std::string SharedArena::describe_outside(size_t offset) const {
  const Region* nearest = nullptr;
  long long distance = 0;
  for (const Region& r : regions_) {
    const long long d = offset < r.offset ? static_cast<long long>(r.offset - offset)
                                          : static_cast<long long>(offset - (r.offset + r.bytes)) + 1;
    if (nearest == nullptr || d < distance) nearest = &r, distance = d;
  }
  if (nearest == nullptr) return "shared memory access outside every declaration";
  const bool before = offset < nearest->offset;
  return "shared memory access " + std::to_string(distance) + (before ? " bytes before \"" : " bytes past the end of \"") +
         nearest->name + "\" (" + std::to_string(nearest->bytes) + " bytes)";
}

bool SharedArena::ordered(uint16_t other, uint32_t barriers_then, uint32_t warp_syncs_then, int thread,
                          const uint32_t* warp_syncs) const {
  if (other == kNobody || other == thread) return true;
  if (barriers_then < barriers_) return true;
  if (other == kSeveral) return false;
  const int warp = thread / 32;
  return other / 32 == warp && warp_syncs_then < warp_syncs[warp];
}

std::string SharedArena::check(const void* p, size_t bytes, bool write, bool atomic, int thread,
                               const uint32_t* warp_syncs) {
  const size_t offset = static_cast<size_t>(static_cast<const unsigned char*>(p) - storage_.data());
  const Region* r = region_of(offset);
  if (r == nullptr || offset + bytes > r->offset + r->bytes) return describe_outside(r == nullptr ? offset : r->offset + r->bytes);
  const auto me = static_cast<uint16_t>(thread);
  const uint32_t my_syncs = warp_syncs[thread / 32];
  auto at = [&](size_t i) { return "\"" + r->name + "\" byte " + std::to_string(offset + i - r->offset); };
  // The bytes of one access usually share their history (one thread wrote the whole row chunk):
  // a byte whose shadow equals the previous byte's gets the previous byte's verdict and update.
  Shadow previous_before{}, previous_after{};
  for (size_t i = 0; i < bytes; ++i) {
    Shadow& s = shadow_[offset + i];
    if (i > 0 && std::memcmp(&s, &previous_before, sizeof s) == 0) {
      s = previous_after;
      continue;
    }
    previous_before = s;
    const bool seen = s.block == block_;
    if (seen && s.in_flight != kNobody) {
      return std::string(write ? "write" : "read") + " of " + at(i) + " while a cp.async of thread " +
             std::to_string(s.in_flight) + " writes it (before that thread's cp.async.wait_group covering the copy)";
    }
    if (atomic) {
      if (!seen || s.writer == kNobody) return "atomic on uninitialised shared memory (" + at(i) + ")";
      previous_after = s;
      continue;
    }
    if (!write) {
      if (!seen || s.writer == kNobody) return "read of uninitialised shared memory (" + at(i) + ", never written by this block)";
      if (!ordered(s.writer, s.write_barriers, s.write_warp_syncs, thread, warp_syncs)) {
        return "shared memory race: read of " + at(i) + " written by thread " + std::to_string(s.writer) +
               " since the last barrier";
      }
      const bool same_epoch = s.reader != kNobody && s.read_barriers == barriers_;
      if (!same_epoch || s.reader == me) {
        s.reader = me;
        s.read_warp_syncs = my_syncs;
      } else if (!(s.reader / 32 == thread / 32 && s.read_warp_syncs == my_syncs)) {
        s.reader = kSeveral;
      }
      s.read_barriers = barriers_;
      previous_after = s;
      continue;
    }
    if (seen) {
      if (!ordered(s.writer, s.write_barriers, s.write_warp_syncs, thread, warp_syncs)) {
        return "shared memory race: write of " + at(i) + " also written by thread " + std::to_string(s.writer) +
               " since the last barrier";
      }
      if (!ordered(s.reader, s.read_barriers, s.read_warp_syncs, thread, warp_syncs)) {
        return "shared memory race: write of " + at(i) + " read by " +
               (s.reader == kSeveral ? std::string("several threads") : "thread " + std::to_string(s.reader)) +
               " since the last barrier";
      }
    } else {
      s.block = block_;
      s.reader = kNobody;
      s.in_flight = kNobody;
    }
    s.writer = me;
    s.write_barriers = barriers_;
    s.write_warp_syncs = my_syncs;
    previous_after = s;
  }
  return {};
}

std::string SharedArena::begin_async_write(const void* p, size_t bytes, int thread, const uint32_t* warp_syncs) {
  std::string wrong = check(p, bytes, true, false, thread, warp_syncs);
  if (!wrong.empty()) return wrong;
  const size_t offset = static_cast<size_t>(static_cast<const unsigned char*>(p) - storage_.data());
  for (size_t i = 0; i < bytes; ++i) shadow_[offset + i].in_flight = static_cast<uint16_t>(thread);
  return {};
}

std::string SharedArena::end_async_write(const void* p, size_t bytes, int thread, const uint32_t* warp_syncs) {
  const size_t offset = static_cast<size_t>(static_cast<const unsigned char*>(p) - storage_.data());
  for (size_t i = 0; i < bytes; ++i) shadow_[offset + i].in_flight = kNobody;
  return check(p, bytes, true, false, thread, warp_syncs);
}

}  // namespace xtrain::interp
