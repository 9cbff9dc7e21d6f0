// One rank's process. The only place that knows Boost.Process (it costs ~9 s of compile time per
// translation unit). The child gets its own process group, dies with xlaunch's main thread
// (PR_SET_PDEATHSIG), reads /dev/null, writes stdout and stderr to one pipe. If exec fails, the
// rank exits 127 (not found) or 126 (cannot execute) with the reason on its output, as a shell
// would.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>

#include <boost/asio/io_context.hpp>

namespace xtrain::launcher {

// How a process ended: exit status, or the signal that killed it (then exit_code is 0).
struct ExitStatus {
  int exit_code = 0;
  int signal = 0;
  bool ok() const { return exit_code == 0 && signal == 0; }
};

// From a waitpid status. (Boost's exit_code() would turn "killed by SIGSEGV" into 11.)
ExitStatus exit_status_from_wait(int wait_status);

struct SpawnRequest {
  std::vector<std::string> argv;            // argv[0] is an absolute path
  std::map<std::string, std::string> env;   // the complete environment
  int output_fd = -1;                       // becomes the child's stdout and stderr
};

class RankProcess {
 public:
  // Call from the main thread only: PR_SET_PDEATHSIG fires when the forking *thread* exits.
  // `on_exit` runs later from `io`, once, never from inside the constructor. Throws
  // std::runtime_error when vfork fails.
  RankProcess(boost::asio::io_context& io, const SpawnRequest& request, std::function<void(ExitStatus)> on_exit);
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  pid_t pid() const { return pid_; }  // also its process group id

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
  pid_t pid_ = -1;
};

}  // namespace xtrain::launcher
