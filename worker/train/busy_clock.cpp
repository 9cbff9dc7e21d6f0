#include "worker/train/busy_clock.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <optional>

#include <fcntl.h>
#include <unistd.h>

namespace xtrain {
namespace {

double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The thread's runqueue wait from its schedstat file ("run_ns wait_ns timeslices", regenerated at
// every read from offset 0); nullopt when it cannot be read.
std::optional<double> runqueue_wait_s(int fd) {
  char text[96];
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  unsigned long long run_ns = 0, wait_ns = 0;
  if (std::sscanf(text, "%llu %llu", &run_ns, &wait_ns) != 2) return std::nullopt;
  return static_cast<double>(wait_ns) * 1e-9;
}

}  // namespace

BusyClock::BusyClock() : schedstat_fd_(::open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC)) {
  if (schedstat_fd_ >= 0 && !runqueue_wait_s(schedstat_fd_)) {
    ::close(schedstat_fd_);
    schedstat_fd_ = -1;
  }
  start();
}

BusyClock::~BusyClock() {
  if (schedstat_fd_ >= 0) ::close(schedstat_fd_);
}

BusyClock::Reading BusyClock::read() const {
  Reading r;
  r.wall = std::chrono::steady_clock::now();
  if (schedstat_fd_ < 0) return r;
  const double own = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  r.others_cpu_s = std::max(0.0, cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - own);
  r.runqueue_wait_s = runqueue_wait_s(schedstat_fd_);
  return r;
}

void BusyClock::start() { start_ = read(); }

double BusyClock::elapsed_ms() const {
  const Reading now = read();
  const double wall_s = std::chrono::duration<double>(now.wall - start_.wall).count();
  if (!now.runqueue_wait_s || !start_.runqueue_wait_s) return 1000.0 * wall_s;
  const double lost_s = std::min(now.others_cpu_s - start_.others_cpu_s, *now.runqueue_wait_s - *start_.runqueue_wait_s);
  return 1000.0 * (wall_s - std::clamp(lost_s, 0.0, wall_s));
}

}  // namespace xtrain
