// Helpers for xlaunch's integration tests: run the real binary with a deadline, capture its
// output, write specs into a fresh temporary directory, and check that processes are gone.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

namespace xtrain::test {

std::string bin_path(const std::string& name);  // a program built into XTRAIN_BIN_DIR ($XTRAIN_BIN_DIR)

// A fresh directory under /tmp, removed with everything in it at the end of the test.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A spec whose worker is xtrain-test-worker with `worker_args`, run dir `dir`/run.
nlohmann::json test_spec(const TempDir& dir, int nproc, const std::vector<std::string>& worker_args);
std::string write_file(const std::string& path, const std::string& text);  // returns path
std::string write_spec(const TempDir& dir, const nlohmann::json& spec, const std::string& name = "job.json");

struct Finished {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
  double seconds = 0;     // from start to exit
  double exit_time = 0;   // wall clock (seconds since the epoch) when the exit was seen
};

// A running xlaunch (or any program) with stdout and stderr captured through pipes.
class Process {
 public:
  // `env` null: this process's environment. `own_group`: the process leads a new process group
  // (as a shell's job does), so that a test can signal the whole group.
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>* env = nullptr,
          bool own_group = false);
  ~Process();  // SIGKILLs a process still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void signal(int sig) const;
  // Reads output until both pipes close and the process exits. On timeout SIGKILLs it and
  // returns nullopt. With `read_stdout_when`, stdout stays unread until it returns true.
  std::optional<Finished> wait(double timeout_s, const std::function<bool()>& read_stdout_when = {});

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  double started_ = 0;
};

// Runs xlaunch with `args` to the end (deadline `timeout_s`).
std::optional<Finished> run_xlaunch(const std::vector<std::string>& args, double timeout_s = 30,
                                    const std::map<std::string, std::string>* env = nullptr);

// Runs xlaunch on `spec` (written to `dir`/job.json) plus `args`; the test fails unless it
// ends within `timeout_s`. `summary` is the run's summary.json, or null when there is none.
struct JobRun {
  Finished run;
  nlohmann::json summary;
};
JobRun run_job(const TempDir& dir, const nlohmann::json& spec, const std::vector<std::string>& args = {},
               double timeout_s = 30, const std::map<std::string, std::string>* env = nullptr);

// Polls `condition` every 10 ms until it holds or `timeout_s` passes.
bool wait_until(const std::function<bool()>& condition, double timeout_s);

// Dead: no such process, or a zombie that xlaunch left for init to reap.
bool process_gone(pid_t pid);
pid_t read_pid(const std::string& path);  // -1 when missing

std::string read_file(const std::string& path);
std::vector<std::string> split_lines(const std::string& text);
nlohmann::json read_json(const std::string& path);
bool exists(const std::string& path);
double now_s();  // wall clock, seconds since the epoch
double parse_iso_time(const std::string& text);  // "2026-11-30T10:41:12.345Z" -> seconds since the epoch

// This process's environment with `changes` applied, for Process and run_xlaunch.
std::map<std::string, std::string> environment_with(const std::map<std::string, std::string>& changes);

// "ENV NAME=VALUE" lines printed by --print-env, for one rank's log.
std::map<std::string, std::string> printed_env(const std::string& log_text);

}  // namespace xtrain::test
