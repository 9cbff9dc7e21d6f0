// What Linux's /proc tells about a process and its threads: the state letter (R running, S
// sleeping, D in uninterruptible I/O, T stopped by a signal, t stopped by a debugger, Z zombie),
// the start time that tells a process from a later one with a reused pid, and for each thread its
// name, wchan (the kernel function it sleeps in) and, where the reader may see it (root), its
// kernel stack.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace xtrain::launcher {

struct ProcStat {
  char state = '?';
  std::uint64_t start_time = 0;  // clock ticks after boot (field 22 of /proc/PID/stat)
  std::string name;              // comm
};

// /proc/PID/stat, or /proc/PID/task/TID/stat when tid > 0; nullopt when it is gone.
std::optional<ProcStat> read_proc_stat(pid_t pid, pid_t tid = 0);

// Whether `pid` is still the process that had `start_time` (0: any process with that pid).
bool process_alive(pid_t pid, std::uint64_t start_time);

struct ThreadState {
  pid_t tid = 0;
  std::string name;
  char state = '?';
  std::string wchan;                      // "0" or empty when running
  std::vector<std::string> kernel_stack;  // empty where /proc/PID/task/TID/stack is not readable
};

// Every thread of `pid`, by tid; empty when the process is gone.
std::vector<ThreadState> read_threads(pid_t pid);

// "stopped (SIGSTOP)", "sleeping", ... for a state letter.
std::string describe_state(char state);

}  // namespace xtrain::launcher
