#include "worker/train/backtrace.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>

#include <execinfo.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace xtrain {
namespace {

constexpr int kMaxFrames = 64;

char g_path[4096];            // empty: stderr
std::atomic_flag g_writing;   // one thread's stack at a time
static_assert(std::atomic<bool>::is_always_lock_free);

// "prefix<decimal>suffix" into `out` without the locale or the heap.
size_t format_line(char* out, const char* prefix, long value, const char* suffix) {
  size_t n = 0;
  for (const char* p = prefix; *p; ++p) out[n++] = *p;
  char digits[24];
  int d = 0;
  do {
    digits[d++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (d > 0) out[n++] = digits[--d];
  for (const char* p = suffix; *p; ++p) out[n++] = *p;
  return n;
}

void write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    size -= static_cast<size_t>(n);
  }
}

extern "C" void on_backtrace_signal(int) {
  const int saved_errno = errno;
  while (g_writing.test_and_set(std::memory_order_acquire)) {
  }
  const int fd = g_path[0] ? ::open(g_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644) : STDERR_FILENO;
  if (fd >= 0) {
    const long tid = ::syscall(SYS_gettid);
    char line[64];
    write_all(fd, line, format_line(line, "thread ", tid, "\n"));
    void* frames[kMaxFrames];
    const int n = ::backtrace(frames, kMaxFrames);
    // Frame 0 is this handler, frame 1 the kernel's signal trampoline: the thread's own stack
    // starts at frame 2.
    if (n > 2) ::backtrace_symbols_fd(frames + 2, n - 2, fd);
    write_all(fd, line, format_line(line, "end of thread ", tid, "\n"));
    if (fd != STDERR_FILENO) ::close(fd);
  }
  g_writing.clear(std::memory_order_release);
  errno = saved_errno;
}

}  // namespace

void install_backtrace_handler(const std::string& path) {
  std::strncpy(g_path, path.c_str(), sizeof g_path - 1);
  void* warm_up[1];
  ::backtrace(warm_up, 1);  // loads libgcc_s now, outside any handler
  struct sigaction sa = {};
  sa.sa_handler = on_backtrace_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(kBacktraceSignal, &sa, nullptr);
}

}  // namespace xtrain
