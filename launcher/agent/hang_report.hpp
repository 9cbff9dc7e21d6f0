// Where every rank was when the heartbeat watchdog (or launcher.timeout_s) stopped the job, taken
// before anything is killed:
//   1. at once: each rank's progress record (common/heartbeat_record.hpp) and heartbeat age, its
//      process state, and each thread's name, state, wchan and (as root) kernel stack from /proc;
//   2. then each rank whose record names a backtrace signal and that can run a handler (not
//      stopped, not a zombie) gets that signal in every thread (tgkill); the supervisor polls
//      until every signalled thread has written its stack, or a bounded wait ends;
//   3. the summary names the rank(s) behind and groups the others by what they do:
//        rank 3 is in backward layer 7 of step 1042; ranks 0-2 and 4-7 wait on all-reduce bucket 7 of step 1042
//        rank 1 is stopped (SIGSTOP): it is in forward layer 0 of step 12; ranks 0 and 2-3 wait ...
// A rank is behind when it is stopped, or when it works (is not waiting on its peers) while
// others wait, at the earliest point of training among those that work.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "common/heartbeat_record.hpp"
#include "launcher/process/proc_info.hpp"

namespace xtrain::launcher {

struct RankSnapshot {
  int rank = 0;
  pid_t pid = 0;                          // the worker's: the rank's process, or its record's pid below it
  std::optional<HeartbeatRecord> record;  // none: the worker keeps no record (or has not yet)
  double heartbeat_age_s = -1;            // since the file was last touched; -1: no file
  char state = '?';                       // '?': the process is gone
  std::vector<ThreadState> threads;
  int backtraces_asked = 0;               // threads that were sent the backtrace signal
  int backtraces_written = 0;             // of those, the ones that wrote their stack in time
  std::vector<std::string> backtrace;     // what they wrote, names demangled
};

class HangReport {
 public:
  struct Target {
    int rank;
    pid_t pid;
  };
  // Steps 1 and 2 above. `why`: "heartbeat" or "job_timeout", for the JSON.
  HangReport(std::string run_dir, const std::vector<Target>& ranks, std::string why);

  // Every signalled thread has written its stack (or nothing was asked).
  bool backtraces_complete() const;
  // Reads what the signalled threads wrote so far; call once, when complete or out of time.
  void collect_backtraces();

  const std::vector<RankSnapshot>& ranks() const { return ranks_; }
  // summary.json's "hang_report": {"trigger", "summary", "behind", "ranks": [{"rank", "pid",
  // "state", "state_text", "heartbeat_age_s", "progress", "threads", "backtrace", "backtrace_note"}]}
  nlohmann::json to_json() const;

 private:
  std::string run_dir_;
  std::string why_;
  std::vector<RankSnapshot> ranks_;
  std::int64_t taken_ns_ = 0;
};

// The ranks the others wait for; may be empty (nobody can be singled out).
std::vector<int> ranks_behind(const std::vector<RankSnapshot>& ranks);
// One sentence: the ranks behind first, then the others grouped by what they do.
std::string summarize(const std::vector<RankSnapshot>& ranks);

// "rank 3", "ranks 0-2 and 4-7", "ranks 0, 2 and 5-6" (sorted input).
std::string rank_list(const std::vector<int>& ranks);

// One line of backtrace_symbols_fd output with the C++ name demangled:
// "/bin/w(_ZN6xtrain3GPT8backwardEf+0x1a4) [0x55]" -> "/bin/w(xtrain::GPT::backward(float)+0x1a4) [0x55]".
std::string demangle_frame(const std::string& line);

}  // namespace xtrain::launcher
