#include "launcher/stragglers.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace xtrain::launcher {

std::vector<StragglerDetector::Change> StragglerDetector::observe(int rank, long step, double busy_ms) {
  std::vector<Change> changes;
  RankState& state = ranks_[rank];
  if (step <= state.last_step) return changes;  // a beat without a new step
  state.last_step = step;
  state.busy_ms = busy_ms;
  // The newest step that every rank has finished: judge it once.
  long complete = step;
  for (const auto& [r, s] : ranks_) complete = std::min(complete, s.last_step);
  if (ranks_.size() >= 2 && complete > judged_step_) judge(complete, changes);
  return changes;
}

void StragglerDetector::new_attempt() {
  ranks_.clear();
  judged_step_ = 0;
}

void StragglerDetector::judge(long step, std::vector<Change>& changes) {
  judged_step_ = step;
  std::vector<double> busy;
  for (const auto& [rank, s] : ranks_) busy.push_back(s.busy_ms);
  std::sort(busy.begin(), busy.end());
  const size_t n = busy.size();
  const double median = n % 2 ? busy[n / 2] : (busy[n / 2 - 1] + busy[n / 2]) / 2;
  if (median <= 0) return;
  for (auto& [rank, s] : ranks_) {
    const double ratio = s.busy_ms / median;
    const bool slow = ratio >= 1 + kSlowerBy && s.busy_ms - median >= kMinExcessMs;
    if (!slow) {
      ++s.fast_steps;
      if (s.episode < 0 || s.fast_steps >= kRecoverSteps) {
        if (s.episode >= 0) {
          changes.push_back({fmt::format("rank {} recovered at step {}: busy {:.1f} ms per step, the median rank's "
                                         "{:.1f} ms",
                                         rank, step, s.busy_ms, median),
                             false});
        }
        s = RankState{s.last_step, s.busy_ms};
      }
      continue;
    }
    if (s.slow_since == 0) s.slow_since = step;
    s.fast_steps = 0;
    s.ratio_sum += ratio - 1;
    ++s.slow_steps;
    const double slower_by = s.ratio_sum / static_cast<double>(s.slow_steps);
    if (s.episode >= 0) {
      episodes_[static_cast<size_t>(s.episode)].slower_by = slower_by;
    } else if (step - s.slow_since + 1 >= kStreak) {
      s.episode = static_cast<int>(episodes_.size());
      episodes_.push_back({rank, s.slow_since, slower_by});
      changes.push_back({fmt::format("rank {} is a straggler: {:.0f}% slower than the median rank for {} steps "
                                     "since step {} (busy {:.1f} ms per step against {:.1f} ms)",
                                     rank, 100 * slower_by, step - s.slow_since + 1, s.slow_since, s.busy_ms, median),
                         true});
    }
  }
}

nlohmann::json StragglerDetector::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Episode& e : episodes_) {
    out.push_back({{"rank", e.rank}, {"first_step", e.first_step}, {"slower_by", e.slower_by}});
  }
  return out;
}

}  // namespace xtrain::launcher
