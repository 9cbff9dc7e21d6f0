// One block of an interpret-mode launch (block_run.hpp): the scheduler, the waits' resolution,
// cp.async, and the faults it reports.
#include "cuda/interp/block_run.hpp"

#include <algorithm>
#include <cstring>
#include <numeric>

namespace xtrain::interp {

constinit thread_local BlockRun* t_block [[gnu::tls_model("initial-exec")]] = nullptr;
constinit thread_local ThreadRecord* t_thread [[gnu::tls_model("initial-exec")]] = nullptr;

namespace {

std::string triple(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

std::string hex(unsigned v) {
  char b[16];
  std::snprintf(b, sizeof b, "%08x", v);
  return b;
}

}  // namespace

void BlockRun::run(const uint3& block_idx, Schedule schedule, std::mt19937_64& rng) {
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
        if (t.state == ThreadState::faulted) new ctx::fiber(std::move(t.fiber));
      }
      self->threads_.clear();
      t_thread = nullptr;  // an unwound fiber's InExecutor put its thread back
    }
  } leave{this};
  for (;;) {
    if (schedule == Schedule::random) std::shuffle(order_.begin(), order_.end(), rng);
    for (int i : order_) {
      ThreadRecord& t = threads_[static_cast<size_t>(i)];
      if (t.state != ThreadState::ready) continue;
      resume(t);
      if (fault_) throw *fault_;
    }
    if (std::all_of(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == ThreadState::exited; })) {
      return;
    }
    resolve_waits();
    if (fault_) throw *fault_;
  }
}

void BlockRun::wait(ThreadRecord& t, ThreadState state, const char* op, WarpCombine combine, unsigned mask) {
  t.state = state;
  t.op = op;
  t.combine = combine;
  t.mask = mask;
  t.sink = std::move(t.sink).resume();
}

void BlockRun::abandon(ThreadRecord& t, int code, const std::string& what) {
  if (!fault_) fault_ = fault_at(t, code, what);
  t.state = ThreadState::faulted;
  t.sink = std::move(t.sink).resume();
  std::abort();  // never resumed
}

void BlockRun::async_copy(ThreadRecord& t, void* dst, const void* src, int src_bytes) {
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

void BlockRun::async_wait(ThreadRecord& t, int n) {
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

KernelFault BlockRun::fault_at(const ThreadRecord& t, int code, const std::string& what) const {
  return KernelFault(static_cast<cudaError_t>(code), "kernel " + config_.kernel + ", block " + triple(t.pos.block_idx) +
                                                         ", thread " + triple(t.pos.thread_idx) + ": " + what);
}

void BlockRun::resume(ThreadRecord& t) {
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
      t.state = ThreadState::exited;
      return std::move(t.sink);
    });
  }
  t_thread = &t;
  t.fiber = std::move(t.fiber).resume();
  t_thread = nullptr;
}

void BlockRun::resolve_waits() {
  bool released = false;
  for (size_t w = 0; w < warps_.size() && !fault_; ++w) released = resolve_warp(w) || released;
  if (fault_ || released) return;
  const auto at_barrier = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == ThreadState::at_barrier; });
  const auto exited = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == ThreadState::exited; });
  const auto waiting_warp = static_cast<long>(threads_.size()) - at_barrier - exited;
  if (at_barrier > 0 && waiting_warp == 0) {
    if (exited > 0) {
      const auto gone = std::find_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == ThreadState::exited; });
      fault_ = fault_at(*gone, cudaErrorLaunchFailure,
                        "returned without reaching the __syncthreads that " + std::to_string(at_barrier) + " of the block's " +
                            std::to_string(threads_.size()) + " threads wait at (a barrier in divergent code)");
      return;
    }
    for (ThreadRecord& t : threads_) t.state = ThreadState::ready;
    arena_.barrier_completed();
    return;
  }
  fault_ = deadlock();
}

bool BlockRun::resolve_warp(size_t w) {
  WarpLanes& lanes = warps_[w];
  ThreadRecord* base = &threads_[w * 32];
  const int count = std::min<int>(32, static_cast<int>(threads_.size() - w * 32));
  bool released = false;
  for (int l = 0; l < count; ++l) {
    ThreadRecord& first = base[l];
    if (first.state != ThreadState::at_warp) continue;
    bool complete = true;
    for (int m = 0; m < 32 && complete; ++m) {
      if (!(first.mask >> m & 1u)) continue;
      if (m >= count) continue;  // a lane that does not exist (partial warp) is inactive
      const ThreadRecord& other = base[m];
      if (other.state == ThreadState::exited) {
        fault_ = fault_at(first, cudaErrorLaunchFailure, std::string(first.op) + " with mask 0x" + hex(first.mask) +
                                                             ": lane " + std::to_string(m) + " has returned");
        return false;
      }
      if (other.state == ThreadState::at_warp && (other.combine != first.combine || other.mask != first.mask)) {
        fault_ = fault_at(first, cudaErrorLaunchFailure,
                          std::string(first.op) + " with mask 0x" + hex(first.mask) + " meets lane " + std::to_string(m) +
                              " at " + other.op + " with mask 0x" + hex(other.mask));
        return false;
      }
      complete = other.state == ThreadState::at_warp;
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
      if (lanes.mask >> m & 1u) base[m].state = ThreadState::ready;
    }
    released = true;
  }
  return released;
}

KernelFault BlockRun::deadlock() const {
  std::string what = "stuck: ";
  const ThreadRecord* first = nullptr;
  for (const ThreadRecord& t : threads_) {
    if (t.state == ThreadState::exited) continue;
    if (first == nullptr) first = &t;
  }
  const auto at_barrier = std::count_if(threads_.begin(), threads_.end(), [](const ThreadRecord& t) { return t.state == ThreadState::at_barrier; });
  what += std::to_string(at_barrier) + " threads wait at __syncthreads";
  for (const ThreadRecord& t : threads_) {
    if (t.state == ThreadState::at_warp) {
      what += ", thread " + std::to_string(t.linear) + " (lane " + std::to_string(t.linear % 32) + ") waits at " + t.op +
              " with mask 0x" + hex(t.mask) + " for lanes that never come";
      break;
    }
  }
  return fault_at(*first, cudaErrorLaunchFailure, what);
}

}  // namespace xtrain::interp
