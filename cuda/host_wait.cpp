#include "cuda/host_wait.hpp"

#include <thread>

namespace xtrain::cuda {

bool poll_until_done(const HostWaitProbes& probes, std::chrono::steady_clock::duration timeout,
                     std::chrono::microseconds pause) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (probes.work_done()) return true;
    if (probes.check_peers) probes.check_peers();
    if (Clock::now() - start > timeout) return false;
    std::this_thread::sleep_for(pause);
  }
}

std::chrono::steady_clock::duration timeout_of(double seconds) {
  using Duration = std::chrono::steady_clock::duration;
  const std::chrono::duration<double> asked(seconds);
  const std::chrono::duration<double> longest = Duration::max();  // the cast of more is undefined
  return asked >= longest ? Duration::max() : std::chrono::duration_cast<Duration>(asked);
}

}  // namespace xtrain::cuda
