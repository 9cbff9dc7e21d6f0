#include "launcher/process/proc_info.hpp"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return text.str();
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

std::optional<ProcStat> read_proc_stat(pid_t pid, pid_t tid) {
  const std::string base = "/proc/" + std::to_string(pid) + (tid > 0 ? "/task/" + std::to_string(tid) : "");
  const std::optional<std::string> text = read_text(base + "/stat");
  if (!text) return std::nullopt;
  // "PID (COMM) S ...": the name may hold spaces and parentheses; it ends at the last ')'.
  const size_t open = text->find('('), close = text->rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 2 >= text->size()) return std::nullopt;
  ProcStat stat;
  stat.name = text->substr(open + 1, close - open - 1);
  std::istringstream fields(text->substr(close + 2));
  std::string field;
  for (int index = 3; fields >> field; ++index) {  // field 3 is the state
    if (index == 3) stat.state = field.empty() ? '?' : field[0];
    if (index == 22) {
      stat.start_time = std::stoull(field);
      break;
    }
  }
  return stat;
}

bool process_alive(pid_t pid, std::uint64_t start_time) {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  const std::optional<ProcStat> stat = read_proc_stat(pid);
  return stat && stat->state != 'Z' && (start_time == 0 || stat->start_time == start_time);
}

std::vector<ThreadState> read_threads(pid_t pid) {
  std::vector<ThreadState> threads;
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& entry : fs::directory_iterator(tasks, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    ThreadState t;
    t.tid = static_cast<pid_t>(std::stol(name));
    const std::optional<ProcStat> stat = read_proc_stat(pid, t.tid);
    if (!stat) continue;  // exited meanwhile
    t.name = stat->name;
    t.state = stat->state;
    t.wchan = trimmed(read_text(entry.path().string() + "/wchan").value_or(""));
    std::istringstream stack(read_text(entry.path().string() + "/stack").value_or(""));
    for (std::string line; std::getline(stack, line);) {
      if (!line.empty()) t.kernel_stack.push_back(line);
    }
    threads.push_back(std::move(t));
  }
  std::sort(threads.begin(), threads.end(), [](const ThreadState& a, const ThreadState& b) { return a.tid < b.tid; });
  return threads;
}

std::string describe_state(char state) {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible I/O";
    case 'T': return "stopped (SIGSTOP)";
    case 't': return "stopped by a debugger";
    case 'Z': return "a zombie";
    case 'X': return "dead";
    case 'I': return "idle";
    default: return std::string("in state ") + state;
  }
}

}  // namespace xtrain::launcher
