#include "launcher/run/outcome.hpp"

#include <ctime>

#include <fmt/format.h>

#include "common/exit_codes.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;

std::string format_time(WallTime time, bool utc, const char* pattern) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(time);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(time.time_since_epoch()).count() % 1000;
  std::tm parts{};
  if (utc) {
    gmtime_r(&seconds, &parts);
  } else {
    localtime_r(&seconds, &parts);
  }
  char text[64];
  std::strftime(text, sizeof(text), pattern, &parts);
  return fmt::format("{}.{:03d}", text, ms);
}

json optional_exit_code(const std::optional<ExitStatus>& exit) {
  return exit && exit->signal == 0 ? json(exit->exit_code) : json(nullptr);
}

json optional_signal(const std::optional<ExitStatus>& exit) {
  return exit && exit->signal != 0 ? json(exit->signal) : json(nullptr);
}

}  // namespace

std::string status_name(RankStatus status) {
  switch (status) {
    case RankStatus::kNotStarted: return "not_started";
    case RankStatus::kRunning: return "running";
    case RankStatus::kSucceeded: return "succeeded";
    case RankStatus::kFailed: return "failed";
    case RankStatus::kHung: return "hung";
    case RankStatus::kStopped: return "stopped";
    case RankStatus::kSpawnFailed: return "spawn_failed";
  }
  return "unknown";
}

std::string outcome_name(OutcomeKind kind) {
  switch (kind) {
    case OutcomeKind::kSucceeded: return "succeeded";
    case OutcomeKind::kPreempted: return "preempted";
    case OutcomeKind::kRankFailed: return "failed";
    case OutcomeKind::kRankHung: return "hung";
    case OutcomeKind::kJobTimeout: return "timed_out";
    case OutcomeKind::kSignal: return "stopped";
    case OutcomeKind::kLaunchFailed: return "launch_failed";
    case OutcomeKind::kNodeLost: return "node_lost";
  }
  return "unknown";
}

OutcomeKind outcome_kind(const std::string& name) {
  for (OutcomeKind kind : {OutcomeKind::kSucceeded, OutcomeKind::kPreempted, OutcomeKind::kRankFailed, OutcomeKind::kRankHung,
                           OutcomeKind::kJobTimeout, OutcomeKind::kSignal, OutcomeKind::kNodeLost}) {
    if (outcome_name(kind) == name) return kind;
  }
  return OutcomeKind::kLaunchFailed;
}

std::string describe(const ExitStatus& exit) {
  if (exit.signal == 0) return "exit code " + std::to_string(exit.exit_code);
  return exit_code::killed_by(exit.signal);
}

std::string clock_time(WallTime time) { return format_time(time, false, "%H:%M:%S"); }

std::string iso_time(WallTime time) { return format_time(time, true, "%Y-%m-%dT%H:%M:%S") + "Z"; }

double seconds_between(SteadyTime from, SteadyTime to) {
  return std::chrono::duration<double>(to - from).count();
}

json read_result_file(const std::string& path) {
  try {
    const auto doc = read_json_file(path);
    if (!doc) return nullptr;
    if (!doc->is_object()) return {{"unreadable", path + ": expected a JSON object, got " + doc->dump()}};
    return *doc;
  } catch (const std::exception& e) {
    return {{"unreadable", e.what()}};
  }
}

json to_json(const RankRecord& rank) {
  const bool ran = rank.status != RankStatus::kNotStarted && rank.status != RankStatus::kSpawnFailed;
  const bool ended = rank.exit.has_value();
  return {{"rank", rank.where.rank},
          {"local_rank", rank.where.local_rank},
          {"node", rank.where.node_rank},
          {"pid", rank.pid > 0 ? json(rank.pid) : json(nullptr)},
          {"start_time", rank.start_time > 0 ? json(rank.start_time) : json(nullptr)},
          {"status", status_name(rank.status)},
          {"exit_code", optional_exit_code(rank.exit)},
          {"signal", optional_signal(rank.exit)},
          {"duration_s", ran && ended ? json(seconds_between(rank.started, rank.ended)) : json(nullptr)},
          {"result", rank.result}};
}

json to_json(const RankFailure& failure) {
  static const char* const kKinds[] = {"exited", "hung", "spawn_failed"};
  return {{"rank", failure.rank},
          {"node", failure.node},
          {"pid", failure.pid > 0 ? json(failure.pid) : json(nullptr)},
          {"kind", kKinds[static_cast<int>(failure.kind)]},
          {"exit_code", optional_exit_code(failure.exit)},
          {"signal", optional_signal(failure.exit)},
          {"time", iso_time(failure.time)},
          {"message", failure.message.empty() ? json(nullptr) : json(failure.message)},
          {"log_tail", failure.log_tail}};
}

std::vector<std::string> report_lines(const RankFailure& failure) {
  std::string what;
  switch (failure.kind) {
    case FailureKind::kExited: what = "failed: " + describe(*failure.exit); break;
    case FailureKind::kHung: what = "hung"; break;
    case FailureKind::kSpawn: what = "could not be started"; break;
  }
  std::string who = failure.pid > 0 ? fmt::format("rank {} (pid {})", failure.rank, failure.pid)
                                    : fmt::format("rank {}", failure.rank);
  if (failure.node > 0) who = fmt::format("node {} {}", failure.node, who);
  std::string head = fmt::format("{} {} at {}", who, what, clock_time(failure.time));
  if (!failure.message.empty()) head += "; message: " + failure.message;
  head += failure.log_tail.empty() ? "; it printed nothing" : "; last lines:";
  std::vector<std::string> lines = {head};
  for (const std::string& line : failure.log_tail) lines.push_back("  | " + line);
  return lines;
}

}  // namespace xtrain::launcher
