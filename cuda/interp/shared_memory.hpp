// Interpret mode's shared memory: one arena per launch, laid out as the launch's dynamic shared
// memory followed by the kernel's static declarations, each region between red zones, so that
// an access is checked against the region it belongs to. Before each block the arena is filled
// with 0xFF bytes (a NaN in fp32 and in bf16) and its shadow forgotten, so that a read of a byte
// no thread of this block has written is reported (and would read NaN if it were not).
//
// Races: the shadow remembers, per byte, the last writer and the last reader(s) with the
// block's barrier count and their warp's __syncwarp count at the time. An access by another
// thread conflicts unless a __syncthreads completed since, or both threads are in one warp and
// a __syncwarp of that warp completed since (shuffles, votes and mma order no memory: CUDA
// says so). Read after write, write after read and write after write are all reported. A
// cp.async destination is in flight from the copy to its issuer's wait: touching it is reported.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xtrain::interp {

// An H200's limits (CUDA's table for compute capability 9.0).
constexpr size_t kStaticSharedLimit = 48 * 1024;
constexpr size_t kSharedOptinLimit = 227 * 1024;

class SharedArena {
 public:
  SharedArena();
  // A new launch with `dynamic_bytes` of dynamic shared memory: no declarations yet.
  void begin_launch(size_t dynamic_bytes, int threads_per_block);
  // A new block: every byte unwritten again, every thread's next declaration its first.
  void begin_block();

  void* dynamic() { return base() + kRedZone; }
  // Thread `thread`'s next static declaration. Throws std::runtime_error (the caller makes it a
  // fault) when threads disagree about it or the limits are exceeded.
  void* declare(int thread, const char* name, size_t bytes, size_t align);
  size_t static_bytes() const { return static_bytes_; }

  bool contains(const void* p) const {
    const auto* b = static_cast<const unsigned char*>(p);
    return b >= storage_.data() && b < storage_.data() + storage_.size();
  }
  // An empty string when the access is fine, else what is wrong with it.
  std::string check(const void* p, size_t bytes, bool write, bool atomic, int thread, const uint32_t* warp_syncs);
  void barrier_completed() { ++barriers_; }
  // cp.async: at issue, the bytes are checked as `thread`'s write and then marked in flight
  // (check() refuses every access to them, the issuer's own included); at the wait that covers
  // the copy, the mark goes and they are checked as its write again, at that barrier count.
  std::string begin_async_write(const void* p, size_t bytes, int thread, const uint32_t* warp_syncs);
  std::string end_async_write(const void* p, size_t bytes, int thread, const uint32_t* warp_syncs);

 private:
  static constexpr size_t kRedZone = 256;
  static constexpr uint16_t kNobody = 0xFFFF, kSeveral = 0xFFFE;

  struct Region {
    std::string name;
    size_t offset, bytes;
  };
  struct Shadow {
    uint32_t block = 0;  // which block's accesses this describes (0: none)
    uint16_t writer = kNobody, reader = kNobody;
    uint16_t in_flight = kNobody;  // a cp.async of this thread writes the byte, not yet waited for
    uint32_t write_barriers = 0, read_barriers = 0;
    uint32_t write_warp_syncs = 0, read_warp_syncs = 0;
  };

  unsigned char* base() { return storage_.data(); }
  const Region* region_of(size_t offset) const;
  std::string describe_outside(size_t offset) const;
  bool ordered(uint16_t other, uint32_t barriers_then, uint32_t warp_syncs_then, int thread,
               const uint32_t* warp_syncs) const;

  std::vector<unsigned char> storage_;
  std::vector<Shadow> shadow_;
  std::vector<Region> regions_;       // [0] is the dynamic memory
  std::vector<int> next_declaration_; // per thread
  size_t end_ = 0;                    // first byte after the last region's red zone
  size_t static_bytes_ = 0;
  uint32_t block_ = 0;
  uint32_t barriers_ = 0;
};

}  // namespace xtrain::interp
