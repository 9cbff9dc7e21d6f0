// The guard: a tiny process forked at startup that makes sure no process of the job outlives
// xlaunch. PR_SET_PDEATHSIG kills the ranks themselves when xlaunch dies, but not their
// children. xlaunch tells the guard which process groups exist ("+PGID" / "-PGID" lines on a
// pipe); when the pipe reaches end-of-file without a "bye" line, xlaunch died (even by SIGKILL,
// which no handler sees), and the guard SIGKILLs every group still listed, then exits.
#pragma once

#include <string>

#include <sys/types.h>

namespace xtrain::launcher {

class Guard {
 public:
  // Forks the guard. Call before any thread exists: fork copies only the calling thread.
  Guard();
  ~Guard();  // says "bye" and reaps the guard
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  void watch(pid_t pgid);    // a rank's group started
  void release(pid_t pgid);  // the group was killed after its rank was reaped

 private:
  void send(const std::string& line);

  int pipe_fd_ = -1;  // write end, O_CLOEXEC so that ranks do not hold it open
  pid_t pid_ = -1;
  bool broken_ = false;
};

}  // namespace xtrain::launcher
