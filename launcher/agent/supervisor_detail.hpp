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

// The signals the supervisor's signal_set takes, blocked until it exists (block_handled_signals).
inline constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

inline SteadyClock::duration seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

// "1 rank", "4 ranks"
inline std::string plural(int n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

}  // namespace xtrain::launcher::supervisor_detail
