#include "common/exit_codes.hpp"

#include <csignal>
#include <cstring>

namespace xtrain::exit_code {

std::string describe(int code) {
  switch (code) {
    case kSuccess: return "every rank exited 0";
    case kInvalidSpec: return "invalid command line or job spec; nothing was started";
    case kTimeout: return "wall-clock limit passed or a rank stopped sending heartbeats";
    case kLaunchFailure: return "xlaunch could not run the job";
    case kNotExecutable: return "worker command is not executable";
    case kNotFound: return "worker command not found";
    default: break;
  }
  if (code > kSignalBase && code < kSignalBase + 65) {
    const char* name = sigabbrev_np(code - kSignalBase);
    return std::string("killed by signal ") + std::to_string(code - kSignalBase) +
           (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exit code " + std::to_string(code);
}

}  // namespace xtrain::exit_code
