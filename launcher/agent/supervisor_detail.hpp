// What the supervisor's own files (supervisor*.cpp) share; nothing else includes it.
#pragma once

#include <chrono>
#include <string>

#include <csignal>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace xtrain::launcher::supervisor_detail {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

// The signals that stop the job: Ctrl-C, a scheduler's or `kill`'s SIGTERM, the terminal closing,
// and Ctrl-\ (SIGQUIT, whose default would end xlaunch with a core dump and leave the ranks to
// the guard's SIGKILL); torchrun stops on the same four.
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
// The signals the supervisor's signal_set takes, blocked until it exists (block_handled_signals):
// the stop signals and the two forwarded to every rank.
inline constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

// How long the other ranks of a diverged step get to end by themselves (Supervisor::await_diverged_ranks):
// they fail at the same step, a moment after the first.
inline constexpr double kDivergedWaitS = 2.0;

inline SteadyClock::duration seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

// "1 rank", "4 ranks"
inline std::string plural(int n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

}  // namespace xtrain::launcher::supervisor_detail
