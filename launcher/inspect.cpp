#include "launcher/inspect.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>

#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/exit_codes.hpp"
#include "common/number_format.hpp"
#include "launcher/process/live_status.hpp"
#include "launcher/process/log_stream.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kLivenessCheckMs = 500;  // logs --follow: how often to ask whether a silent supervisor died

// The run's newest record: summary.json when the run finished, else state.json.
struct RunRecord {
  json run;
  bool finished = false;         // from summary.json
  bool summary_damaged = false;  // summary.json is there but unreadable: state.json instead, with a warning
};

// Throws CliError when `dir` is not a run directory. A damaged summary.json (written atomically, so
// only a damaged disk or an editor makes one) costs the summary, not the state xlaunch kept.
RunRecord read_run(const std::string& dir) {
  if (const auto why = why_not_a_run_dir(dir)) throw CliError(*why);
  RunRecord record;
  try {
    if (auto summary = read_json_file(run_files::summary(dir))) return {std::move(*summary), true, false};
  } catch (const std::runtime_error& e) {
    std::cerr << "xlaunch: warning: " << e.what() << "; showing state.json instead" << std::endl;
    record.summary_damaged = true;
  }
  record.run = read_json_file(run_files::state(dir)).value_or(json());
  return record;
}

// object[key] as text, "-" when missing or null (files from an older or a dead xlaunch may lack keys).
std::string text(const json& object, const char* key) {
  const json value = object.is_object() ? object.value(key, json()) : json();
  if (value.is_null()) return "-";
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// A rank's or root cause's "exit_code"/"signal" pair: "3", "signal 15" or "-".
std::string exit_text(const json& record) {
  return text(record, "signal") != "-" ? "signal " + text(record, "signal") : text(record, "exit_code");
}

// "failed, exit code 3: rank 1 failed: exit code 3 (2.31 s, 1 attempt)"
std::string outcome_line(const json& summary) {
  return fmt::format("{}, exit code {}: {} ({:.2f} s, {} attempt(s))", text(summary, "status"),
                     text(summary, "exit_code"), text(summary, "exit_reason"), summary.value("duration_s", 0.0),
                     text(summary, "attempts"));
}

// "step 412/1000 | loss 2.1345 | 12,345 tok/s | ETA 0:01:02"; an ended run has no ETA.
std::string progress_line(const json& p, bool running) {
  std::string line = fmt::format("step {}/{}", text(p, "step"), text(p, "total_steps"));
  if (p.value("loss", json()).is_number()) line += fmt::format(" | loss {:.4f}", p["loss"].get<double>());
  const double tok_s = p.value("tokens_per_s", 0.0);
  if (tok_s > 0) line += " | " + with_thousands(static_cast<long long>(tok_s + 0.5)) + " tok/s";
  if (running && p.value("step", 0) < p.value("total_steps", 0)) line += " | ETA " + format_duration(p.value("eta_s", 0.0));
  return line;
}

// "rank 3 (35% slower from step 300, recovered at step 700)"
std::string stragglers_line(const json& stragglers) {
  std::string line;
  for (const json& s : stragglers) {
    line += fmt::format("{}rank {} ({:.0f}% slower from step {}{})", line.empty() ? "" : ", ", text(s, "rank"),
                        100 * s.value("slower_by", 0.0), text(s, "first_step"),
                        s.contains("recovered_step") ? ", recovered at step " + text(s, "recovered_step") : "");
  }
  return line;
}

// The phase column: what a running rank is doing; for one that failed or was stopped, where it
// was when it ended ("last: ..."), and for a diverged one the step.
std::string phase_text(const json& rank) {
  const json phase = rank.value("phase", json());
  if (!phase.is_object()) return "-";
  const std::string status = text(rank, "status");
  if (status == "running" || status == "succeeded") return text(phase, "text");
  const json result = rank.value("result", json());
  if (result.is_object() && result.value("failure_kind", json()) == "diverged") {
    return "diverged at step " + text(phase, "step");
  }
  return "last: " + text(phase, "text");
}

void print_ranks(const json& ranks) {
  std::cout << fmt::format("{:>6}  {:>8}  {:<13} {:<9} {:>9}  {}\n", "rank", "pid", "status", "exit", "heartbeat",
                           "phase");
  for (const json& rank : ranks) {
    const bool running = text(rank, "status") == "running";
    const json age = rank.value("heartbeat_age_s", json());
    std::cout << fmt::format("{:>6}  {:>8}  {:<13} {:<9} {:>9}  {}\n", text(rank, "rank"), text(rank, "pid"),
                             text(rank, "status"), exit_text(rank),
                             running && age.is_number() ? fmt::format("{:.1f} s", age.get<double>()) : "-",
                             phase_text(rank));
  }
}

void print_status(const std::string& dir, const RunRecord& record, bool alive) {
  const json& run = record.run;
  const bool finished = record.finished;
  std::cout << "run dir:  " << dir << "\n";
  if (run.contains("run_id")) std::cout << "run:      " << text(run, "run_id") << "\n";
  if (finished) {
    std::cout << "status:   finished: " << outcome_line(run) << "\n";
    const json cause = run.value("root_cause", json());
    if (cause.is_object()) {
      std::cout << fmt::format("root cause: rank {} (pid {}) {} at {}", text(cause, "rank"), text(cause, "pid"),
                               text(cause, "kind"), text(cause, "time"));
      if (exit_text(cause) != "-") std::cout << ", " << (text(cause, "signal") != "-" ? "" : "exit code ") << exit_text(cause);
      if (text(cause, "message") != "-") std::cout << "; message: " << text(cause, "message");
      std::cout << "\n";
    }
  } else if (alive) {
    std::cout << fmt::format("status:   {} (supervisor pid {}, attempt {} of {})\n", text(run, "status"),
                             text(run, "supervisor_pid"), text(run, "attempt"),
                             run.value("max_restarts", 0) + 1);
  } else {
    std::cout << "status:   lost: the supervisor (pid " << text(run, "supervisor_pid") << ") is gone and "
              << (record.summary_damaged ? "its summary.json is unreadable" : "left no summary.json")
              << "; its ranks are checked by pid and start time\n";
  }
  if (run.value("progress", json()).is_object()) {
    std::cout << "progress: " << progress_line(run["progress"], alive && !finished) << "\n";
  }
  const json stragglers = run.value("stragglers", json::array());
  if (stragglers.is_array() && !stragglers.empty()) std::cout << "stragglers: " << stragglers_line(stragglers) << "\n";
  if (run.contains("ranks")) print_ranks(run.at("ranks"));
}

// One followed log file: new bytes since `offset`, raw or as "[rank R] " lines.
struct FollowedLog {
  int rank = 0;
  std::string path;
  off_t offset = 0;
  LineSplitter splitter;
};

void print_line(int rank, std::string_view line) { std::cout << "[rank " << rank << "] " << line << '\n'; }

void print_new_bytes(FollowedLog& log, bool prefixed) {
  const int fd = ::open(log.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buffer[64 * 1024];
  ssize_t n;
  while ((n = ::pread(fd, buffer, sizeof(buffer), log.offset)) > 0) {
    log.offset += n;
    const std::string_view chunk(buffer, static_cast<size_t>(n));
    if (!prefixed) {
      std::cout.write(chunk.data(), n);
      continue;
    }
    log.splitter.feed(chunk, [&](std::string_view line) { print_line(log.rank, line); });
  }
  ::close(fd);
  std::cout.flush();
}

std::vector<FollowedLog> find_logs(const std::string& dir, const std::optional<int>& only) {
  std::map<int, FollowedLog> logs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(run_files::logs(dir), ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".log") continue;
    const std::string digits = name.substr(5, name.size() - 9);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int rank = std::stoi(digits);
    if (!only || *only == rank) logs[rank] = FollowedLog{rank, entry.path().string(), 0, {}};
  }
  if (only && logs.empty()) {
    throw CliError(fmt::format("--rank {}: no such log in \"{}\"", *only, run_files::logs(dir)));
  }
  std::vector<FollowedLog> out;
  for (auto& [rank, log] : logs) out.push_back(std::move(log));
  return out;
}

// A detached supervisor creates the rank logs a moment after `--detach` returns.
void add_new_logs(std::vector<FollowedLog>& logs, const std::string& dir) {
  for (FollowedLog& found : find_logs(dir, std::nullopt)) {
    const auto same = [&](const FollowedLog& log) { return log.rank == found.rank; };
    if (std::none_of(logs.begin(), logs.end(), same)) logs.push_back(std::move(found));
  }
}

bool run_over(const std::string& dir) {
  return fs::exists(run_files::summary(dir)) || !supervisor_running(dir);
}

// Sleeps until something changes in logs/ or the run dir, or kLivenessCheckMs pass.
void wait_for_change(int inotify_fd) {
  pollfd p{inotify_fd, POLLIN, 0};
  if (::poll(&p, 1, kLivenessCheckMs) > 0) {
    char events[16 * 1024];
    (void)!::read(inotify_fd, events, sizeof(events));
  }
}

}  // namespace

int show_status(const CliOptions& options) {
  const std::string& dir = options.run_dir;
  const bool alive = supervisor_running(dir);
  RunRecord record = read_run(dir);
  record.run = with_live_state(dir, std::move(record.run));
  if (options.json) {
    json out = record.run;
    out["source"] = record.finished ? "summary.json" : "state.json";
    out["supervisor_running"] = alive;
    std::cout << out.dump(2) << std::endl;
  } else {
    print_status(dir, record, alive);
  }
  return exit_code::kSuccess;
}

int show_logs(const CliOptions& options) {
  const std::string& dir = options.run_dir;
  if (const auto why = why_not_a_run_dir(dir)) throw CliError(*why);  // the logs need nothing else of the run
  const bool prefixed = !options.rank;
  std::vector<FollowedLog> logs = find_logs(dir, options.rank);
  const int inotify_fd = options.follow ? ::inotify_init1(IN_CLOEXEC) : -1;
  if (inotify_fd >= 0) {
    ::inotify_add_watch(inotify_fd, run_files::logs(dir).c_str(), IN_MODIFY | IN_CREATE);
    ::inotify_add_watch(inotify_fd, dir.c_str(), IN_MOVED_TO | IN_CREATE);
  }
  while (true) {
    // Decide before reading: whatever was written before the run ended is read below.
    const bool over = !options.follow || run_over(dir);
    for (FollowedLog& log : logs) {
      print_new_bytes(log, prefixed);
      if (over) log.splitter.finish([&](std::string_view line) { print_line(log.rank, line); });
    }
    if (over) break;
    wait_for_change(inotify_fd);
    if (prefixed) add_new_logs(logs, dir);
  }
  if (inotify_fd >= 0) ::close(inotify_fd);
  std::cout.flush();
  return exit_code::kSuccess;
}

int stop_run(const CliOptions& options) {
  const std::string& dir = options.run_dir;
  const RunRecord record = read_run(dir);
  const json& run = record.run;
  if (!supervisor_running(dir)) {
    std::cout << "xlaunch: no supervisor is running in " << dir;
    if (record.finished) std::cout << "; it finished: " << outcome_line(run);
    std::cout << std::endl;
    return exit_code::kSuccess;
  }
  const pid_t pid = run.value("supervisor_pid", 0);
  if (pid <= 0 || ::kill(pid, SIGTERM) != 0) {
    launch_failure(fmt::format("cannot signal the supervisor (pid {}): {}", pid, std::strerror(errno)));
  }
  std::cout << "xlaunch: sent SIGTERM to the supervisor (pid " << pid << "); waiting for it to stop the ranks"
            << std::endl;
  wait_for_supervisor_exit(dir);
  const auto summary = read_json_file(run_files::summary(dir));
  std::cout << "xlaunch: " << (summary ? "the run ended: " + outcome_line(*summary) : "the supervisor left no summary.json")
            << std::endl;
  return exit_code::kSuccess;
}

}  // namespace xtrain::launcher
