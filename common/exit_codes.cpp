#include "common/exit_codes.hpp"

#include <csignal>
#include <cstring>

namespace xtrain::exit_code {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string killed_by(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return "killed by signal " + std::to_string(sig) + (abbrev ? std::string(" (SIG") + abbrev + ")" : "");
}

}  // namespace xtrain::exit_code
