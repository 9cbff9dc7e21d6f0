#include "launcher/agent/hang_report.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>

#include <cxxabi.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/worker_env.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;

constexpr const char* kEndOfThread = "end of thread ";

bool stopped(char state) { return state == 'T' || state == 't'; }

// Sends the rank's backtrace signal to each of its threads; returns how many got it.
int ask_for_backtraces(const RankSnapshot& rank, const std::string& file) {
  ::unlink(file.c_str());  // a file left by an earlier request (SIGUSR2 by hand) would count
  int asked = 0;
  for (const ThreadState& thread : rank.threads) {
    if (::syscall(SYS_tgkill, rank.pid, thread.tid, rank.record->backtrace_signal) == 0) ++asked;
  }
  return asked;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Complete stacks in a backtrace file: its "end of thread" lines.
int count_stacks(const std::vector<std::string>& lines) {
  return static_cast<int>(
      std::count_if(lines.begin(), lines.end(), [](const std::string& l) { return l.rfind(kEndOfThread, 0) == 0; }));
}

// What the rank does, as a verb phrase: {singular, plural}.
std::pair<std::string, std::string> activity(const RankSnapshot& r) {
  if (r.state == '?' || r.state == 'Z' || r.state == 'X') return {"has exited", "have exited"};
  if (stopped(r.state)) {
    const std::string how = r.state == 'T' ? "stopped (SIGSTOP)" : "stopped by a debugger";
    const std::string where = r.record ? ": it " + describe_phase(*r.record) : "";
    return {"is " + how + where, "are " + how + where};
  }
  if (r.record) return {describe_phase(*r.record, false), describe_phase(*r.record, true)};
  const std::string beat = r.heartbeat_age_s >= 0 ? fmt::format(", last heartbeat {:.1f} s ago", r.heartbeat_age_s)
                                                  : ", no heartbeat";
  return {"is " + describe_state(r.state) + beat, "are " + describe_state(r.state) + beat};
}

// Where a working rank is in training, for finding the earliest.
std::tuple<std::int64_t, int, int, int> progress_key(const HeartbeatRecord& r) {
  const auto phase = static_cast<WorkerPhase>(r.phase);
  // Within a micro-step: data, forward (layers up), backward (layers down); then the step's end.
  int order = 0, layer = 0;
  switch (phase) {
    case WorkerPhase::kData: order = 0; break;
    case WorkerPhase::kForward: order = 1, layer = r.detail; break;
    case WorkerPhase::kBackward: order = 2, layer = -r.detail; break;
    default: order = 3 + r.phase; break;
  }
  return {r.step, r.micro_step, order, layer};
}

bool works(const RankSnapshot& r) {
  return r.record && !stopped(r.state) && r.state != '?' && r.state != 'Z' && !waits_on_peers(*r.record) &&
         static_cast<WorkerPhase>(r.record->phase) != WorkerPhase::kDone;
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    runs.push_back(j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]));
    i = j + 1;
  }
  std::string text;
  for (size_t i = 0; i < runs.size(); ++i) {
    text += (i == 0 ? "" : i + 1 == runs.size() ? " and " : ", ") + runs[i];
  }
  const bool one = ranks.size() == 1;
  return (one ? "rank " : "ranks ") + text;
}

std::string demangle_frame(const std::string& line) {
  const size_t open = line.find('(');
  const size_t end = line.find_first_of("+)", open == std::string::npos ? 0 : open);
  if (open == std::string::npos || end == std::string::npos || end == open + 1) return line;
  const std::string mangled = line.substr(open + 1, end - open - 1);
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> name(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status),
                                                   &std::free);
  if (status != 0 || !name) return line;
  return line.substr(0, open + 1) + name.get() + line.substr(end);
}

HangReport::HangReport(std::string run_dir, const std::vector<Target>& ranks, std::string why)
    : run_dir_(std::move(run_dir)), why_(std::move(why)), taken_ns_(realtime_ns()) {
  for (const Target& target : ranks) {
    RankSnapshot r;
    r.rank = target.rank;
    r.pid = target.pid;
    const std::string beat_file = heartbeat_file_path(run_dir_, target.rank);
    r.record = read_heartbeat_record(beat_file);
    r.heartbeat_age_s = heartbeat_age_s(beat_file, taken_ns_).value_or(-1);
    // The worker may run below the rank's process (a wrapper script): its record names its pid,
    // taken when that process is in the rank's process group (not a stale record's reused pid).
    if (r.record && r.record->pid > 0 && ::getpgid(r.record->pid) == target.pid) r.pid = r.record->pid;
    if (const auto stat = read_proc_stat(r.pid)) r.state = stat->state;
    r.threads = read_threads(r.pid);
    ranks_.push_back(std::move(r));
  }
  // Only after every snapshot: a signal changes what a thread is doing.
  for (RankSnapshot& r : ranks_) {
    if (r.record && r.record->backtrace_signal > 0 && !stopped(r.state) && r.state != 'Z' && r.state != '?') {
      r.backtraces_asked = ask_for_backtraces(r, backtrace_file_path(run_dir_, r.rank));
    }
  }
}

bool HangReport::backtraces_complete() const {
  for (const RankSnapshot& r : ranks_) {
    if (r.backtraces_asked > 0 && count_stacks(read_lines(backtrace_file_path(run_dir_, r.rank))) < r.backtraces_asked) {
      return false;
    }
  }
  return true;
}

void HangReport::collect_backtraces() {
  for (RankSnapshot& r : ranks_) {
    if (r.backtraces_asked == 0) continue;
    const std::vector<std::string> lines = read_lines(backtrace_file_path(run_dir_, r.rank));
    r.backtraces_written = count_stacks(lines);
    for (const std::string& line : lines) r.backtrace.push_back(demangle_frame(line));
  }
}

std::vector<int> ranks_behind(const std::vector<RankSnapshot>& ranks) {
  std::vector<int> out;
  for (const RankSnapshot& r : ranks) {
    if (stopped(r.state)) out.push_back(r.rank);
  }
  if (!out.empty()) return out;
  const bool someone_waits = std::any_of(ranks.begin(), ranks.end(), [](const RankSnapshot& r) {
    return r.record && waits_on_peers(*r.record);
  });
  if (!someone_waits) return out;  // nobody waits on anybody: the job is slow, not stuck on a rank
  std::optional<std::tuple<std::int64_t, int, int, int>> earliest;
  for (const RankSnapshot& r : ranks) {
    if (works(r) && (!earliest || progress_key(*r.record) < *earliest)) earliest = progress_key(*r.record);
  }
  for (const RankSnapshot& r : ranks) {
    if (works(r) && progress_key(*r.record) == *earliest) out.push_back(r.rank);
  }
  return out;
}

std::string summarize(const std::vector<RankSnapshot>& ranks) {
  const std::vector<int> first = ranks_behind(ranks);
  // Groups of ranks doing the same thing, the ranks behind first, then by their lowest rank.
  std::vector<std::pair<std::string, std::string>> phrases;
  std::map<std::string, std::vector<int>> members;  // singular phrase -> ranks
  const auto add = [&](const RankSnapshot& r) {
    auto phrase = activity(r);
    if (!members.count(phrase.first)) phrases.push_back(phrase);
    members[phrase.first].push_back(r.rank);
  };
  for (const RankSnapshot& r : ranks) {
    if (std::find(first.begin(), first.end(), r.rank) != first.end()) add(r);
  }
  for (const RankSnapshot& r : ranks) {
    if (std::find(first.begin(), first.end(), r.rank) == first.end()) add(r);
  }
  std::string text;
  for (const auto& [singular, plural] : phrases) {
    const std::vector<int>& who = members[singular];
    text += (text.empty() ? "" : "; ") + rank_list(who) + " " + (who.size() == 1 ? singular : plural);
  }
  return text;
}

json HangReport::to_json() const {
  json ranks = json::array();
  for (const RankSnapshot& r : ranks_) {
    json threads = json::array();
    for (const ThreadState& t : r.threads) {
      threads.push_back({{"tid", t.tid},
                         {"name", t.name},
                         {"state", std::string(1, t.state)},
                         {"wchan", t.wchan},
                         {"kernel_stack", t.kernel_stack}});
    }
    std::string note;
    if (r.backtraces_asked == 0) {
      note = stopped(r.state) ? "stopped: it cannot run a signal handler"
             : !r.record || r.record->backtrace_signal == 0 ? "the worker offers no backtrace signal"
                                                              : "gone";
    } else if (r.backtraces_written < r.backtraces_asked) {
      note = fmt::format("{} of {} threads wrote their stack in time (one in uninterruptible I/O cannot)",
                         r.backtraces_written, r.backtraces_asked);
    }
    ranks.push_back({{"rank", r.rank},
                     {"pid", r.pid},
                     {"state", std::string(1, r.state)},
                     {"state_text", r.state == '?' ? "gone" : describe_state(r.state)},
                     {"heartbeat_age_s", r.heartbeat_age_s >= 0 ? json(r.heartbeat_age_s) : json(nullptr)},
                     {"progress", r.record ? xtrain::to_json(*r.record, taken_ns_) : json(nullptr)},
                     {"threads", threads},
                     {"backtrace", r.backtrace},
                     {"backtrace_note", note.empty() ? json(nullptr) : json(note)}});
  }
  return {{"trigger", why_}, {"summary", summarize(ranks_)}, {"behind", ranks_behind(ranks_)}, {"ranks", ranks}};
}

}  // namespace xtrain::launcher
