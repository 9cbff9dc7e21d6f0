// One logging setup for both programs: one line per event, time to the millisecond, a tag saying
// who speaks ("xlaunch", or nothing for a worker: xlaunch prefixes "[rank R]" itself).
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace xtrain {

// Sends spdlog's default logger to stderr (or to `file` when not empty, appending) with the
// pattern "2026-11-30 10:41:12.123 [tag] level: message". Level "warning" and above only when quiet.
void init_logging(const std::string& tag, const std::string& file = "", bool quiet = false);

}  // namespace xtrain
