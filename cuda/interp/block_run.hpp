// One block of an interpret-mode launch: its threads as fibers, run in the schedule's order
// between switch points, their waits, their cp.async copies and the checks of every access they
// make (executor.hpp says how). Private to this folder: executor.cpp runs launches and holds the
// device-side entry points, which call into the running block; block_run.cpp is the block.
#pragma once

#include <dlfcn.h>

#include <array>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/executor.hpp"
#include "cuda/interp/kernel_fault.hpp"
#include "cuda/interp/shared_memory.hpp"

namespace xtrain::interp {

namespace ctx = boost::context;

// Enough for our kernels' register tiles (a 128-wide head's accumulators are 1 KiB) with a wide
// margin; the guard page below each stack turns an overflow into a crash, not corruption.
constexpr size_t kStackBytes = 256 * 1024;

class StackPool {
 public:
  ~StackPool() {
    for (ctx::stack_context& s : free_) allocator_.deallocate(s);
  }
  ctx::stack_context take() {
    if (free_.empty()) return allocator_.allocate();
    ctx::stack_context s = free_.back();
    free_.pop_back();
    return s;
  }
  void give(ctx::stack_context s) { free_.push_back(s); }

 private:
  ctx::protected_fixedsize_stack allocator_{kStackBytes};
  std::vector<ctx::stack_context> free_;
};

// What Boost.Context asks of a stack allocator, served from the pool; it tells the thread where
// its stack lies (accesses there are the thread's own).
struct PooledStack {
  StackPool* pool;
  const unsigned char** low;
  const unsigned char** high;
  ctx::stack_context allocate() {
    ctx::stack_context s = pool->take();
    *high = static_cast<const unsigned char*>(s.sp);
    *low = *high - s.size;
    return s;
  }
  void deallocate(ctx::stack_context& s) noexcept { pool->give(s); }
};

// faulted: stopped at the fault, never resumed (see abandon).
enum class ThreadState { ready, at_barrier, at_warp, exited, faulted };

// One cp.async not yet waited for: its source bytes as read at issue, for dst at the wait.
struct AsyncCopy {
  unsigned char* dst;
  unsigned char bytes[16];
  uint32_t group;  // the number of commits before it: the group that commit number `group` closes
};

struct ThreadRecord {
  ThreadPosition pos;
  std::vector<AsyncCopy> copies;  // in issue order
  uint32_t commits = 0;
  int linear = 0;
  ThreadState state = ThreadState::ready;
  const char* op = nullptr;  // the switch point it waits at
  WarpCombine combine = nullptr;
  unsigned mask = 0;
  ctx::fiber fiber, sink;
  const unsigned char* stack_low = nullptr;
  const unsigned char* stack_high = nullptr;
};

class BlockRun;
// The block and the thread running now (null between kernels, and while the executor's own code
// runs on a thread's behalf). initial-exec: the access hooks read these on every load and store,
// and the general TLS model of a dlopen'ed library costs a call each time (two pointers fit
// glibc's static TLS reserve); constinit: no dynamic initialiser, so no wrapper call either.
extern constinit thread_local BlockRun* t_block [[gnu::tls_model("initial-exec")]];
extern constinit thread_local ThreadRecord* t_thread [[gnu::tls_model("initial-exec")]];

class BlockRun {
 public:
  BlockRun(const LaunchConfig& config, const KernelBody& body, SharedArena& arena, StackPool& stacks,
           WriteJournal* journal)
      : config_(config), body_(body), arena_(arena), stacks_(stacks), journal_(journal) {}

  // Runs every thread of block `block_idx` to its end; throws the block's first KernelFault.
  void run(const uint3& block_idx, Schedule schedule, std::mt19937_64& rng);

  // ---- called from device code, on the thread's fiber -------------------------------------------

  // Suspends the thread at a switch point until resolve_waits() makes it ready.
  void wait(ThreadRecord& t, ThreadState state, const char* op, WarpCombine combine, unsigned mask);
  WarpLanes& warp_of(const ThreadRecord& t) { return warps_[static_cast<size_t>(t.linear / 32)]; }
  SharedArena& arena() { return arena_; }
  const uint32_t* warp_syncs() const { return warp_syncs_.data(); }

  // An atomic float add in device memory, for the journal (shared memory is the block's own).
  void note_float_add(const float* p, float before, float v) {
    if (journal_ != nullptr && in_device_space(p)) journal_->float_add(p, before, v);
  }
  // Stops the running thread at a fault: the block is aborted once it is back in the scheduler.
  [[noreturn]] void abandon(ThreadRecord& t, int code, const std::string& what);
  void async_copy(ThreadRecord& t, void* dst, const void* src, int src_bytes);
  void async_wait(ThreadRecord& t, int n);
  KernelFault fault_at(const ThreadRecord& t, int code, const std::string& what) const;

  // Every load and store of kernel code (inline: the access hooks' path).
  void check_access(ThreadRecord& t, const void* p, size_t bytes, bool write, bool atomic) {
    if (arena_.contains(p)) {
      const std::string wrong = arena_.check(p, bytes, write, atomic, t.linear, warp_syncs_.data());
      if (!wrong.empty()) abandon(t, cudaErrorLaunchFailure, wrong);
      return;
    }
    const auto a = reinterpret_cast<uintptr_t>(p);
    if (in_device_space(p)) {
      if (!in_cached_allocation(a, bytes)) {
        uintptr_t lo = 0, hi = 0;
        if (!device_allocation_of(p, lo, hi) || a + bytes > hi) {
          abandon(t, cudaErrorIllegalAddress,
                  "global memory access of " + std::to_string(bytes) + " bytes: " + describe_bad_device_range(p, bytes));
        }
        cached_[next_cached_++ % cached_.size()] = {lo, hi};
      }
      if (write && journal_ != nullptr) journal_->before_write(p, bytes);
      return;
    }
    const auto* b = static_cast<const unsigned char*>(p);
    if (b >= t.stack_low && b + bytes <= t.stack_high) return;
    const auto* params = static_cast<const unsigned char*>(body_.storage());
    if (b >= params && b + bytes <= params + body_.storage_bytes()) return;
    Dl_info info{};
    if (dladdr(p, &info) != 0) return;  // the program's static data (constants, tables)
    char where[32];
    std::snprintf(where, sizeof where, "%p", p);
    abandon(t, cudaErrorIllegalAddress, std::string(write ? "write" : "read") + " of host memory at " + where +
                                         " (not device memory, not shared memory, not the thread's stack)");
  }

 private:
  bool in_cached_allocation(uintptr_t a, size_t bytes) const {
    for (const auto& [lo, hi] : cached_) {
      if (a >= lo && a + bytes <= hi) return true;
    }
    return false;
  }

  void resume(ThreadRecord& t);
  // Completes every wait that can complete; a fault when none can.
  void resolve_waits();
  bool resolve_warp(size_t w);
  KernelFault deadlock() const;

  const LaunchConfig& config_;
  const KernelBody& body_;
  SharedArena& arena_;
  StackPool& stacks_;
  WriteJournal* journal_;
  std::vector<ThreadRecord> threads_;
  std::vector<WarpLanes> warps_;
  std::vector<uint32_t> warp_syncs_;
  std::vector<int> order_;
  std::optional<KernelFault> fault_;
  // The allocations this launch touched last (no allocation is freed while a kernel runs).
  std::array<std::pair<uintptr_t, uintptr_t>, 8> cached_{};
  size_t next_cached_ = 0;
};

}  // namespace xtrain::interp
