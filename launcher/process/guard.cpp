#include "launcher/process/guard.hpp"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace xtrain::launcher {
namespace {

// The guard's whole life. Signals that would stop xlaunch (a terminal's ^C, SIGTERM to the
// process group, a hang-up) must not stop the guard: it has to outlive xlaunch.
[[noreturn]] void run_guard(int read_fd, pid_t xlaunch) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU}) {
    ::signal(sig, SIG_IGN);
  }
  ::setpgid(0, 0);  // a kill of xlaunch's process group must not take the guard with it
  const int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, STDIN_FILENO);
  ::dup2(null_fd, STDOUT_FILENO);

  std::set<pid_t> groups;
  std::string pending;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(read_fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buffer, static_cast<size_t>(n));
    for (size_t newline; (newline = pending.find('\n')) != std::string::npos; pending.erase(0, newline + 1)) {
      const std::string line = pending.substr(0, newline);
      if (line == "bye") ::_exit(0);
      const pid_t pgid = static_cast<pid_t>(std::atol(line.c_str() + 1));
      if (pgid <= 1) continue;
      if (line[0] == '+') groups.insert(pgid);
      if (line[0] == '-') groups.erase(pgid);
    }
  }
  for (pid_t pgid : groups) ::killpg(pgid, SIGKILL);
  if (!groups.empty()) {
    std::fprintf(stderr, "[xlaunch guard] xlaunch (pid %d) died; killed %zu rank process groups\n",
                 static_cast<int>(xlaunch), groups.size());
  }
  ::_exit(0);
}

}  // namespace

Guard::Guard() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("guard: pipe: ") + std::strerror(errno));
  const pid_t xlaunch = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error(std::string("guard: fork: ") + std::strerror(errno));
  if (pid_ == 0) {
    ::close(fds[1]);
    run_guard(fds[0], xlaunch);
  }
  ::close(fds[0]);
  pipe_fd_ = fds[1];
}

Guard::~Guard() {
  send("bye");
  ::close(pipe_fd_);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

void Guard::watch(pid_t pgid) { send("+" + std::to_string(pgid)); }

void Guard::release(pid_t pgid) { send("-" + std::to_string(pgid)); }

void Guard::send(const std::string& line) {
  if (broken_) return;
  const std::string text = line + "\n";
  while (::write(pipe_fd_, text.data(), text.size()) < 0) {
    if (errno == EINTR) continue;
    broken_ = true;
    spdlog::warn("the guard process (pid {}) is gone: {}; ranks' children may outlive a crash of xlaunch", pid_,
                 std::strerror(errno));
    return;
  }
}

}  // namespace xtrain::launcher
