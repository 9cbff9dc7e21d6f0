#include "cuda/interp/executor.hpp"

#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <boost/context/fiber.hpp>
#include <boost/context/protected_fixedsize_stack.hpp>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "cuda/interp/device_memory.hpp"
#include "cuda/interp/kernel_fault.hpp"
#include "cuda/interp/shared_memory.hpp"

namespace xtrain::interp {
namespace ctx = boost::context;

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::in_order: return "in order";
    case Schedule::reversed: return "reversed";
    case Schedule::random: return "random";
  }
  return "?";
}

std::string kernel_name(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info) != 0 && info.dli_sname != nullptr && info.dli_saddr == address) {
    int status = 0;
    std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), std::free);
    std::string name = status == 0 ? text.get() : info.dli_sname;
    // "void ns::k<T>(T*, int)" -> "ns::k<T>": the parameters say nothing the template does not.
    if (name.rfind("void ", 0) == 0) name.erase(0, 5);
    int depth = 0;
    for (size_t i = name.size(); i-- > 0;) {
      if (name[i] == ')') ++depth;
      if (name[i] == '(' && --depth == 0) {
        name.erase(i);
        break;
      }
    }
    return name;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "kernel at %p", address);
  return buffer;
}

namespace {

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
enum class State { ready, at_barrier, at_warp, exited, faulted };

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
  State state = State::ready;
  const char* op = nullptr;  // the switch point it waits at
  WarpCombine combine = nullptr;
  unsigned mask = 0;
  ctx::fiber fiber, sink;
  const unsigned char* stack_low = nullptr;
  const unsigned char* stack_high = nullptr;
};

std::string triple(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

class BlockRun;
// initial-exec: the access hooks read these on every load and store, and the general TLS model
// of a dlopen'ed library costs a call each time (two pointers fit glibc's static TLS reserve).
[[gnu::tls_model("initial-exec")]] thread_local BlockRun* t_block = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local ThreadRecord* t_thread = nullptr;

class BlockRun {
 public:
  BlockRun(const LaunchConfig& config, const KernelBody& body, SharedArena& arena, StackPool& stacks,
           WriteJournal* journal)
      : config_(config), body_(body), arena_(arena), stacks_(stacks), journal_(journal) {}

  void run(const uint3& block_idx, Schedule schedule, std::mt19937_64& rng) {
    const dim3 bd = config_.block;
    const int n = static_cast<int>(bd.x * bd.y * bd.z);
    threads_.clear();
    threads_.resize(static_cast<size_t>(n));
    warps_.assign(static_cast<size_t>((n + 31) / 32), WarpLanes{});
    warp_syncs_.assign(warps_.size(), 0);
    for (size_t w = 0; w < warps_.size(); ++w) {
      const int lanes = std::min(32, n - static_cast<int>(w) * 32);
      warps_[w].present = lanes == 32 ? 0xFFFFFFFFu : (1u << lanes) - 1u;
    }
    arena_.begin_block();
    for (int i = 0; i < n; ++i) {
      ThreadRecord& t = threads_[static_cast<size_t>(i)];
      t.linear = i;
      t.pos = {{static_cast<unsigned>(i) % bd.x, static_cast<unsigned>(i) / bd.x % bd.y,
                static_cast<unsigned>(i) / (bd.x * bd.y)},
               block_idx, bd, config_.grid};
    }
    order_.resize(static_cast<size_t>(n));
    std::iota(order_.begin(), order_.end(), 0);
    if (schedule == Schedule::reversed) std::reverse(order_.begin(), order_.end());
    t_block = this;
    struct Leave {
      BlockRun* self;
      ~Leave() {
        t_block = nullptr;
        t_thread = nullptr;
        // A faulted thread stopped inside an access hook, which the compiler treats as a call
        // that cannot throw: its stack must not be unwound, so its fiber is left suspended for
        // good (its stack is not reused). The others unwind from their switch points.
        for (ThreadRecord& t : self->threads_) {
          if (t.state == State::faulted) new ctx::fiber(std::move(t.fiber));
        }
        self->threads_.clear();
        t_thread = nullptr;  // an unwound fiber's InExecutor put its thread back
      }
    } leave{this};
    for (;;) {
      if (schedule == Schedule::random) std::shuffle(order_.begin(), order_.end(), rng);
      for (int i : order_) {
        ThreadRecord& t = threads_[static_cast<size_t>(i)];
        if (t.state != State::ready) continue;
        resume(t);
        if (fault_) throw *fault_;
      }
      if (std::all_of(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == State::exited; })) {
        return;
      }
      resolve_waits();
      if (fault_) throw *fault_;
    }
  }

  // ---- called from device code, on the thread's fiber -------------------------------------------

  void wait(ThreadRecord& t, State state, const char* op, WarpCombine combine, unsigned mask) {
    t.state = state;
    t.op = op;
    t.combine = combine;
    t.mask = mask;
    t.sink = std::move(t.sink).resume();
  }

  WarpLanes& warp_of(const ThreadRecord& t) { return warps_[static_cast<size_t>(t.linear / 32)]; }
  SharedArena& arena() { return arena_; }
  const uint32_t* warp_syncs() const { return warp_syncs_.data(); }

  // Stops the running thread at a fault: the block is aborted once it is back in the scheduler.
  [[noreturn]] void abandon(ThreadRecord& t, int code, const std::string& what) {
    if (!fault_) fault_ = fault_at(t, code, what);
    t.state = State::faulted;
    t.sink = std::move(t.sink).resume();
    std::abort();  // never resumed
  }

  void async_copy(ThreadRecord& t, void* dst, const void* src, int src_bytes) {
    char where[32];
    std::snprintf(where, sizeof where, "%p", dst);
    if (!arena_.contains(dst)) abandon(t, cudaErrorIllegalAddress, std::string("cp.async destination ") + where + " is not shared memory");
    if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0) {
      abandon(t, cudaErrorMisalignedAddress, "cp.async of 16 bytes needs 16-byte aligned addresses (destination " +
                                                 std::string(where) + ")");
    }
    if (src_bytes < 0 || src_bytes > 16) {
      abandon(t, cudaErrorLaunchFailure, "cp.async src-size " + std::to_string(src_bytes) + " outside 0..16");
    }
    AsyncCopy c{static_cast<unsigned char*>(dst), {}, t.commits};
    if (src_bytes > 0) {
      if (arena_.contains(src) || !in_device_space(src)) abandon(t, cudaErrorIllegalAddress, "cp.async source is not global memory");
      check_access(t, src, static_cast<size_t>(src_bytes), false, false);
      std::memcpy(c.bytes, src, static_cast<size_t>(src_bytes));
    }
    const std::string wrong = arena_.begin_async_write(dst, 16, t.linear, warp_syncs_.data());
    if (!wrong.empty()) abandon(t, cudaErrorLaunchFailure, "cp.async: " + wrong);
    t.copies.push_back(c);
  }

  void async_wait(ThreadRecord& t, int n) {
    if (n < 0) abandon(t, cudaErrorLaunchFailure, "cp.async.wait_group " + std::to_string(n));
    // Groups complete in commit order; the open group (no commit yet) is never waited for.
    const uint32_t done = t.commits > static_cast<uint32_t>(n) ? t.commits - static_cast<uint32_t>(n) : 0;
    size_t k = 0;
    for (; k < t.copies.size() && t.copies[k].group < done; ++k) {
      const AsyncCopy& c = t.copies[k];
      const std::string wrong = arena_.end_async_write(c.dst, 16, t.linear, warp_syncs_.data());
      if (!wrong.empty()) abandon(t, cudaErrorLaunchFailure, "cp.async.wait_group: " + wrong);
      std::memcpy(c.dst, c.bytes, sizeof c.bytes);
    }
    t.copies.erase(t.copies.begin(), t.copies.begin() + static_cast<long>(k));
  }

  KernelFault fault_at(const ThreadRecord& t, int code, const std::string& what) const {
    return KernelFault(static_cast<cudaError_t>(code), "kernel " + config_.kernel + ", block " + triple(t.pos.block_idx) +
                                                           ", thread " + triple(t.pos.thread_idx) + ": " + what);
  }

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

  void resume(ThreadRecord& t) {
    if (!t.fiber) {
      t.fiber = ctx::fiber(std::allocator_arg, PooledStack{&stacks_, &t.stack_low, &t.stack_high},
                           [this, &t](ctx::fiber&& sink) {
        t.sink = std::move(sink);
        try {
          body_.run_thread();
        } catch (const std::exception& e) {
          if (!fault_) fault_ = fault_at(t, cudaErrorLaunchFailure, e.what());
        }
        if (!t.copies.empty() && !fault_) {
          fault_ = fault_at(t, cudaErrorLaunchFailure,
                            "returned with " + std::to_string(t.copies.size()) +
                                " cp.async copies that no cp.async.wait_group covered");
        }
        t.state = State::exited;
        return std::move(t.sink);
      });
    }
    t_thread = &t;
    t.fiber = std::move(t.fiber).resume();
    t_thread = nullptr;
  }

  // Completes every wait that can complete; a fault when none can.
  void resolve_waits() {
    bool released = false;
    for (size_t w = 0; w < warps_.size() && !fault_; ++w) released = resolve_warp(w) || released;
    if (fault_ || released) return;
    const auto at_barrier = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == State::at_barrier; });
    const auto exited = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == State::exited; });
    const auto waiting_warp = static_cast<long>(threads_.size()) - at_barrier - exited;
    if (at_barrier > 0 && waiting_warp == 0) {
      if (exited > 0) {
        const auto gone = std::find_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == State::exited; });
        fault_ = fault_at(*gone, cudaErrorLaunchFailure,
                          "returned without reaching the __syncthreads that " + std::to_string(at_barrier) + " of the block's " +
                              std::to_string(threads_.size()) + " threads wait at (a barrier in divergent code)");
        return;
      }
      for (ThreadRecord& t : threads_) t.state = State::ready;
      arena_.barrier_completed();
      return;
    }
    fault_ = deadlock();
  }

  bool resolve_warp(size_t w) {
    WarpLanes& lanes = warps_[w];
    ThreadRecord* base = &threads_[w * 32];
    const int count = std::min<int>(32, static_cast<int>(threads_.size() - w * 32));
    bool released = false;
    for (int l = 0; l < count; ++l) {
      ThreadRecord& first = base[l];
      if (first.state != State::at_warp) continue;
      bool complete = true;
      for (int m = 0; m < 32 && complete; ++m) {
        if (!(first.mask >> m & 1u)) continue;
        if (m >= count) continue;  // a lane that does not exist (partial warp) is inactive
        const ThreadRecord& other = base[m];
        if (other.state == State::exited) {
          fault_ = fault_at(first, cudaErrorLaunchFailure, std::string(first.op) + " with mask 0x" + hex(first.mask) +
                                                               ": lane " + std::to_string(m) + " has returned");
          return false;
        }
        if (other.state == State::at_warp && (other.combine != first.combine || other.mask != first.mask)) {
          fault_ = fault_at(first, cudaErrorLaunchFailure,
                            std::string(first.op) + " with mask 0x" + hex(first.mask) + " meets lane " + std::to_string(m) +
                                " at " + other.op + " with mask 0x" + hex(other.mask));
          return false;
        }
        complete = other.state == State::at_warp;
      }
      if (!complete) continue;
      lanes.mask = first.mask & lanes.present;
      const std::string wrong = first.combine(lanes);
      if (!wrong.empty()) {
        fault_ = fault_at(first, cudaErrorLaunchFailure, std::string(first.op) + ": " + wrong);
        return false;
      }
      if (std::strcmp(first.op, "__syncwarp") == 0) ++warp_syncs_[w];
      for (int m = 0; m < count; ++m) {
        if (lanes.mask >> m & 1u) base[m].state = State::ready;
      }
      released = true;
    }
    return released;
  }

  KernelFault deadlock() const {
    std::string what = "stuck: ";
    const ThreadRecord* first = nullptr;
    for (const ThreadRecord& t : threads_) {
      if (t.state == State::exited) continue;
      if (first == nullptr) first = &t;
    }
    const auto at_barrier = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == State::at_barrier; });
    what += std::to_string(at_barrier) + " threads wait at __syncthreads";
    for (const ThreadRecord& t : threads_) {
      if (t.state == State::at_warp) {
        what += ", thread " + std::to_string(t.linear) + " (lane " + std::to_string(t.linear % 32) + ") waits at " + t.op +
                " with mask 0x" + hex(t.mask) + " for lanes that never come";
        break;
      }
    }
    return fault_at(*first, cudaErrorLaunchFailure, what);
  }

  static std::string hex(unsigned v) {
    char b[16];
    std::snprintf(b, sizeof b, "%08x", v);
    return b;
  }

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

// Device code has called into the executor: while the executor's own code runs (some of it
// library code that the linker may have taken from an instrumented file, e.g. std::string's),
// the access hooks must not take it for the kernel's.
class InExecutor {
 public:
  InExecutor() : thread_(t_thread), block_(t_block) {
    if (thread_ == nullptr || block_ == nullptr) throw std::logic_error("interpret mode: device code called outside a kernel");
    t_thread = nullptr;
  }
  ~InExecutor() { t_thread = thread_; }
  InExecutor(const InExecutor&) = delete;
  InExecutor& operator=(const InExecutor&) = delete;
  ThreadRecord& thread() { return *thread_; }
  BlockRun& block() { return *block_; }

 private:
  ThreadRecord* thread_;
  BlockRun* block_;
};

std::vector<uint3> block_order(const dim3& grid, Schedule schedule, std::mt19937_64& rng) {
  std::vector<uint3> blocks;
  blocks.reserve(static_cast<size_t>(grid.x) * grid.y * grid.z);
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) blocks.push_back({x, y, z});
  if (schedule == Schedule::reversed) std::reverse(blocks.begin(), blocks.end());
  if (schedule == Schedule::random) std::shuffle(blocks.begin(), blocks.end(), rng);
  return blocks;
}

}  // namespace

void execute(const LaunchConfig& config, const KernelBody& body, Schedule schedule, uint64_t seed,
             WriteJournal* journal) {
  static thread_local SharedArena arena;
  static thread_local StackPool stacks;
  const int threads = static_cast<int>(config.block.x * config.block.y * config.block.z);
  arena.begin_launch(config.dynamic_shared_bytes, threads);
  std::mt19937_64 rng(seed);
  BlockRun run(config, body, arena, stacks, journal);
  for (const uint3& b : block_order(config.grid, schedule, rng)) run.run(b, schedule, rng);
}

void execute_under_schedules(const LaunchConfig& config, const KernelBody& body, int schedules) {
  if (schedules <= 1) return execute(config, body, Schedule::in_order, 0, nullptr);
  WriteJournal journal;
  execute(config, body, Schedule::in_order, 0, &journal);
  const auto first = journal.current();
  for (int k = 1; k < schedules; ++k) {
    journal.restore();
    const Schedule s = k == 1 ? Schedule::reversed : Schedule::random;
    const uint64_t seed = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(k);
    execute(config, body, s, seed, &journal);
    const std::string difference = journal.first_difference(first);
    if (!difference.empty()) {
      throw KernelFault(cudaErrorLaunchFailure,
                        "kernel " + config.kernel + ": results differ between the in-order schedule and the " +
                            schedule_name(s) + " one (seed " + std::to_string(seed) + ") at " + difference +
                            ": a race between threads or blocks that no direct check saw");
    }
  }
}

// ---- device-side entry points -------------------------------------------------------------------

ThreadPosition this_thread() {
  if (t_thread == nullptr) throw std::logic_error("interpret mode: threadIdx and friends outside a kernel");
  return t_thread->pos;
}

void check_access(const void* p, size_t bytes, bool write) {
  if (t_thread == nullptr || t_block == nullptr) return;  // no kernel, or a block being unwound
  InExecutor in;
  in.block().check_access(in.thread(), p, bytes, write, false);
}

void check_atomic_access(const void* p, size_t bytes) {
  InExecutor in;
  in.block().check_access(in.thread(), p, bytes, true, true);
}

void sync_threads() {
  InExecutor in;
  in.block().wait(in.thread(), State::at_barrier, "__syncthreads", nullptr, 0);
}

namespace {
std::string no_exchange(WarpLanes&) { return {}; }
}  // namespace

void sync_warp(unsigned mask) {
  InExecutor in;
  if (!(mask >> (in.thread().linear % 32) & 1u)) {
    in.block().abandon(in.thread(), cudaErrorLaunchFailure, "__syncwarp with a mask without its own lane");
  }
  in.block().wait(in.thread(), State::at_warp, "__syncwarp", no_exchange, mask);
}


void warp_collective(const char* name, WarpCombine combine, unsigned mask, const void* in_bytes_p, size_t in_bytes,
                     int arg, int width, void* out, size_t out_bytes) {
  InExecutor in;
  ThreadRecord& t = in.thread();
  const int lane = t.linear % 32;
  if (!(mask >> lane & 1u)) {
    in.block().abandon(t, cudaErrorLaunchFailure, std::string(name) + " with a mask without its own lane");
  }
  WarpLanes& lanes = in.block().warp_of(t);
  std::memcpy(lanes.in[lane], in_bytes_p, in_bytes);
  lanes.in_bytes = in_bytes;
  lanes.arg[lane] = arg;
  lanes.width[lane] = width;
  in.block().wait(t, State::at_warp, name, combine, mask);
  std::memcpy(out, lanes.out[lane], out_bytes);
}

int this_lane() {
  InExecutor in;
  return in.thread().linear % 32;
}

void check_matrix_row(const char* op, const void* row, size_t bytes) {
  InExecutor in;
  char where[32];
  std::snprintf(where, sizeof where, "%p", row);
  if (!in.block().arena().contains(row)) {
    in.block().abandon(in.thread(), cudaErrorIllegalAddress,
                       std::string(op) + ": row address " + where + " is not in shared memory");
  }
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
    in.block().abandon(in.thread(), cudaErrorMisalignedAddress,
                       std::string(op) + ": row address " + where + " is not 16-byte aligned");
  }
  in.block().check_access(in.thread(), row, bytes, false, false);
}

void async_copy_16(void* dst, const void* src, int src_bytes) {
  InExecutor in;
  in.block().async_copy(in.thread(), dst, src, src_bytes);
}

void async_commit() {
  InExecutor in;
  ++in.thread().commits;
}

void async_wait(int n) {
  InExecutor in;
  in.block().async_wait(in.thread(), n);
}

void fault_here(int code, const std::string& what) {
  InExecutor in;
  in.block().abandon(in.thread(), code, what);
}

void* static_shared(const char* name, size_t bytes, size_t align) {
  InExecutor in;
  try {
    return in.block().arena().declare(in.thread().linear, name, bytes, align);
  } catch (const std::runtime_error& e) {
    in.block().abandon(in.thread(), cudaErrorLaunchFailure, e.what());
  }
}

void* dynamic_shared() {
  InExecutor in;
  return in.block().arena().dynamic();
}

}  // namespace xtrain::interp
