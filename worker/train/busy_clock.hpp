// A rank's busy time in a step: the wall time from the step's start to the end of its own compute,
// less the time this rank's other threads kept the training thread off its core meanwhile.
//
// Why the less: the gradients' all-reduces run on the communication threads (Gloo's, ours) beside
// backward. Where a rank's threads share cores (a CPU rank pinned to one core), their work delays
// backward, and how much of it lands before the loss depends on when the peers' data arrives: a rank
// that is a little behind gets all of it, the one ahead little. Two identical ranks on an idle
// 2-core machine were seen 1.4-1.6x apart for dozens of steps that way (stragglers_contention_test.py
// idle: 8 of 18 runs warned; with the all-reduces started only after the loss, none of 12; with this
// correction, 4 of 18, the reported rank needing more CPU per step: switching threads costs). That time
// is the collectives', so it is taken out: the training thread's runqueue wait over the step (the
// time it was ready but another thread ran), up to what the other threads of this process ran
// meanwhile. Another process on the core (a busy loop, a compiler) stays in: that is a straggler.
// Threads that compute for the training thread (OpenBLAS's) while it blocks cause no runqueue wait, so
// their time stays in too.
//
// The runqueue wait is /proc/thread-self/schedstat's second field (the kernel's scheduler statistics);
// where the kernel has none, the busy time is the wall time alone.
#pragma once

#include <chrono>
#include <optional>

namespace xtrain {

class BusyClock {
 public:
  BusyClock();  // on the training thread: the thread it measures
  ~BusyClock();
  BusyClock(const BusyClock&) = delete;
  BusyClock& operator=(const BusyClock&) = delete;

  void start();               // the step begins
  double elapsed_ms() const;  // busy milliseconds since start()
  bool corrects() const { return schedstat_fd_ >= 0; }  // false: the wall time alone

 private:
  struct Reading {
    std::chrono::steady_clock::time_point wall;
    double others_cpu_s = 0;    // this process's CPU time less this thread's
    std::optional<double> runqueue_wait_s;  // this thread's, ready to run but not running; nullopt: unread
  };
  Reading read() const;

  int schedstat_fd_ = -1;
  Reading start_;
};

}  // namespace xtrain
