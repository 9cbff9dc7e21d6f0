// A fixed team of threads that share one piece of work at a time: run(fn) calls fn(member,
// members) on every member, the calling thread being member 0, and returns when all have
// returned. The generate command's decoder splits each token's matrix products and attention
// heads over it (worker/cpu/kv_decoder.hpp): one position's product reads every weight once, and
// several cores draw more memory bandwidth than one. The CPU backend splits the attention's heads
// and its loops over one (worker/cpu/cpu_backend.hpp) while OpenBLAS's pool waits.
//
// Why not OpenBLAS's pool or OpenMP: the decoder's products are its own packed kernels, and a
// token is about 50 short products in a row, so what matters is how soon the helpers start: they
// poll an atomic counter that one increment starts a run with, and sleep on it (a futex) only
// after a while without work, so that within a token they never need waking.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <thread>
#include <vector>

namespace xtrain {

class ThreadTeam {
 public:
  // `members` >= 1 (std::invalid_argument otherwise): members - 1 helper threads are started.
  explicit ThreadTeam(int members);
  ~ThreadTeam();  // stops and joins the helpers
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int members() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls fn(member, members()) on every member and returns when every call has returned. One
  // run at a time, from one thread; fn must not throw (an escaping exception ends the process).
  void run(const std::function<void(int member, int members)>& fn);

  // Calls fn(first, last) on contiguous parts of [0, count) that cover it once, one part per
  // member in member order, every inner boundary a multiple of `align` (>= 1) items; as many
  // parts as give each at least `grain` (>= 1) items, so that a count below 2 * grain runs on the
  // calling thread alone (fn(0, count)), where waking a helper would cost more than it saves.
  void split(size_t count, size_t grain, size_t align, const std::function<void(size_t first, size_t last)>& fn);

 private:
  void help(int member);

  std::vector<std::thread> helpers_;
  const std::function<void(int, int)>* work_ = nullptr;  // the current run's fn
  std::atomic<unsigned> round_{0};    // incremented to start a run; helpers wait for a change
  std::atomic<unsigned> unfinished_{0};  // helpers still in the current run
  std::atomic<bool> stopping_{false};
};

// The floats in a cache line: parts of a float array that members write are aligned to it
// (ThreadTeam::split's align, a member's scratch), so that no two members write one line.
constexpr size_t kCacheLineFloats = 64 / sizeof(float);

// The part [first, last) of `count` items that member `member` of `members` takes: contiguous,
// in member order, sizes differing by at most one.
struct TeamShare {
  int first = 0;
  int last = 0;
};
TeamShare team_share(int count, int member, int members);

}  // namespace xtrain
