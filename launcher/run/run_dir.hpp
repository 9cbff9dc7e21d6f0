// The run directory (contract: "The run directory"): job.json, state.json, summary.json,
// logs/rank-R.log, logs/xlaunch.log, ranks/, report.html (and the worker's metrics.jsonl). A live supervisor holds an flock on the directory
// itself, so `status` and `stop` can tell a running supervisor from a dead one without trusting
// a pid that may have been reused.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

namespace run_files {
inline std::string job(const std::string& dir) { return dir + "/job.json"; }
inline std::string state(const std::string& dir) { return dir + "/state.json"; }
inline std::string summary(const std::string& dir) { return dir + "/summary.json"; }
inline std::string logs(const std::string& dir) { return dir + "/logs"; }
inline std::string ranks(const std::string& dir) { return dir + "/ranks"; }
inline std::string supervisor_log(const std::string& dir) { return dir + "/logs/xlaunch.log"; }
inline std::string metrics(const std::string& dir) { return dir + "/metrics.jsonl"; }
inline std::string report(const std::string& dir) { return dir + "/report.html"; }
inline std::string reserve(const std::string& dir) { return dir + "/.xlaunch-reserve"; }
inline std::string rank_log(const std::string& dir, int rank) {
  return dir + "/logs/rank-" + std::to_string(rank) + ".log";
}
}  // namespace run_files

// The room summary.json and the final state.json need when the run dir's disk is full: from the
// start xlaunch keeps a file of this size allocated (.xlaunch-reserve) and deletes it just before
// it writes them. What they hold is bounded: the root cause's log tail is at most 20 lines of 400
// bytes (8 KB), each rank's result and state entry about 1 KB, a hang report's stack a few KB a
// rank; a failed 2-rank run's summary is about 5 KB. 1 MiB holds a node of 64 ranks with a
// hang report of 8 KB each, twice over (the atomic write needs only the new file's blocks).
inline constexpr long kSummaryReserveBytes = 1 << 20;

// `dir` itself, or its nearest ancestor that exists (where a run dir not yet made would be created).
std::string existing_ancestor(const std::string& dir);

// Throws SpecError on field run_dir when `dir` could not be created or written (a file in the
// way, no write permission, a read-only file system). Creates nothing.
void check_run_dir_creatable(const std::string& dir);

class RunDir {
 public:
  // Creates the directory tree, takes the lock, clears the previous run's summary and rank
  // files, writes job.json. Throws LaunchError (125) naming the path, or when another
  // supervisor holds the directory.
  RunDir(const std::string& dir, const nlohmann::json& job);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;

  const std::string& path() const { return dir_; }
  void write_state(const nlohmann::json& state) const;      // atomic; rewritten on every change
  // Atomic and fsynced; once. First gives up the reserve (below), so it is written on a full disk.
  void write_summary(const nlohmann::json& summary) const;
  void clear_rank_files(int world_size) const;  // result, heartbeat, backtrace and PyTorch error files
  int open_rank_log(int rank) const;                        // O_APPEND; throws LaunchError

 private:
  void keep_reserve() const;

  std::string dir_;
  int lock_fd_ = -1;
};

// Whether a supervisor holds `dir` (is running).
bool supervisor_running(const std::string& dir);

// The launch failure (exit 125) of a run whose run dir another supervisor holds.
[[noreturn]] void fail_run_dir_in_use(const std::string& dir);

// Blocks until no supervisor holds `dir`.
void wait_for_supervisor_exit(const std::string& dir);

// Reads a JSON file; nullopt when it does not exist. Throws std::runtime_error when malformed.
std::optional<nlohmann::json> read_json_file(const std::string& path);

// Why `dir` is not a run directory, as one error line; nullopt when it is one: it holds
// summary.json, or a state.json that is not a checkpoint's (a checkpoint holds one too, and a
// copied checkpoint beside run dirs is common). job.json alone is as likely a user's spec file.
std::optional<std::string> why_not_a_run_dir(const std::string& dir);

}  // namespace xtrain::launcher
