#include "worker/train/lr_schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace xtrain {
namespace {

// Rates as the log prints them: a change below three significant digits (min_lr's 0.1% moves
// the end of the decay by less) would read "takes 0.001 (it was 0.001)", so it is no change.
std::string printed(double rate) { return fmt::format("{:.3g}", rate); }

// How far to look for the first step whose printed rate moves: formatting a million steps' rates
// takes a fraction of a second, once per resume, and few runs have more steps left.
constexpr long kScannedSteps = 1L << 20;

}  // namespace

std::string schedule_change(const TrainSpec& then, const TrainSpec& now, long done) {
  const auto rates_at = [&](long step) {
    return std::pair(printed(learning_rate(now, step)), printed(learning_rate(then, step)));
  };
  const auto [first_now, first_then] = rates_at(done);
  if (first_now != first_then) {
    return fmt::format("step {} takes a learning rate of {} (it was {} on the old schedule)", done + 1, first_now,
                       first_then);
  }
  const long end = std::min<long>(now.steps, done + kScannedSteps);
  for (long step = done + 1; step < end; ++step) {
    const auto [rate_now, rate_then] = rates_at(step);
    if (rate_now != rate_then) {
      return fmt::format("step {} keeps its learning rate of {}; from step {} on the rates change ({} there, {} on "
                         "the old schedule)",
                         done + 1, first_now, step + 1, rate_now, rate_then);
    }
  }
  if (end <= done + 1) return fmt::format("step {}, the last, keeps its learning rate of {}", done + 1, first_now);
  return fmt::format("steps {} to {} keep the old schedule's learning rates ({} at step {})", done + 1, end, first_now,
                     done + 1);
}

}  // namespace xtrain
