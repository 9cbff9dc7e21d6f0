// Failures are data: what each rank did, why a job ended, and how to show both to a person
// (console lines) and to a program (state.json, summary.json).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <nlohmann/json.hpp>

#include "common/worker_env.hpp"
#include "launcher/process/rank_process.hpp"

namespace xtrain::launcher {

using WallTime = std::chrono::system_clock::time_point;
using SteadyTime = std::chrono::steady_clock::time_point;

enum class RankStatus { kNotStarted, kRunning, kSucceeded, kFailed, kHung, kStopped, kSpawnFailed };

struct RankRecord {
  RankPlacement where;
  pid_t pid = 0;
  RankStatus status = RankStatus::kNotStarted;
  std::optional<ExitStatus> exit;
  SteadyTime started{};
  SteadyTime ended{};
  std::uint64_t start_time = 0;  // /proc's start time of pid: tells it from a later process with the same pid
  nlohmann::json result;  // the worker's ranks/rank-R.json, or null
};

enum class FailureKind { kExited, kHung, kSpawn };

// The root cause of a failed attempt.
struct RankFailure {
  FailureKind kind = FailureKind::kExited;
  int rank = 0;
  pid_t pid = 0;
  std::optional<ExitStatus> exit;     // kExited
  WallTime time;
  std::string message;                // the result file's "error", or why it hung / could not start
  std::vector<std::string> log_tail;  // filled when the rank's output has been drained
  int node = 0;                       // nodes.node_rank of the rank's node
};

// kNodeLost: another node's xlaunch (or node 0's rendezvous store) went away mid-attempt (125).
enum class OutcomeKind { kSucceeded, kPreempted, kRankFailed, kRankHung, kJobTimeout, kSignal, kLaunchFailed, kNodeLost };

// Why the job (or one attempt) ended, and xlaunch's exit code for it (contract table).
struct Outcome {
  OutcomeKind kind = OutcomeKind::kSucceeded;
  int exit_code = 0;
  std::string reason;  // one sentence: "rank 1 exited with code 3"
};

std::string status_name(RankStatus status);
std::string outcome_name(OutcomeKind kind);  // summary.json's "status"
OutcomeKind outcome_kind(const std::string& name);  // the inverse; unknown names read as kLaunchFailed

std::string describe(const ExitStatus& exit);  // "exit code 3" | "killed by signal 11 (SIGSEGV)"
std::string clock_time(WallTime time);          // 12:01:02.345, local time
std::string iso_time(WallTime time);            // 2026-11-30T10:41:12.345Z
double seconds_between(SteadyTime from, SteadyTime to);

// The worker's result file: a JSON object, null when absent, {"unreadable": why} when broken.
nlohmann::json read_result_file(const std::string& path);

nlohmann::json to_json(const RankRecord& rank);
nlohmann::json to_json(const RankFailure& failure);

// The root-cause report for the console, one line per element (without the "[xlaunch] " prefix):
//   rank 1 (pid 1234) failed: exit code 3 at 12:01:02.345; message: ...; last lines:
//     | <tail line>
std::vector<std::string> report_lines(const RankFailure& failure);

}  // namespace xtrain::launcher
