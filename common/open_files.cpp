#include "common/open_files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <sys/resource.h>

#include <fmt/format.h>

namespace xtrain {
namespace {

std::size_t open_now() {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    ++n;
  }
  return n;
}

}  // namespace

std::size_t reserve_open_files(std::size_t more, const std::string& what) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    throw std::runtime_error(fmt::format("{}: getrlimit(RLIMIT_NOFILE): {}", what, std::strerror(errno)));
  }
  const std::size_t needed = open_now() + more;
  if (needed <= limit.rlim_cur) return limit.rlim_cur;
  if (limit.rlim_max != RLIM_INFINITY && needed > limit.rlim_max) {
    throw std::runtime_error(fmt::format(
        "{} needs {} open files, but the hard limit is {} (ulimit -Hn): raise it for this user (as root: "
        "`ulimit -Hn {}` in the shell that starts it, LimitNOFILE={} in a systemd unit, or a nofile line in "
        "/etc/security/limits.conf)",
        what, needed, limit.rlim_max, needed, needed));
  }
  limit.rlim_cur = needed;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    throw std::runtime_error(fmt::format("{}: cannot raise the open-file limit to {}: {}", what, needed,
                                         std::strerror(errno)));
  }
  return needed;
}

}  // namespace xtrain
