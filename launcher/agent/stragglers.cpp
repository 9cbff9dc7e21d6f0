#include "launcher/agent/stragglers.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace xtrain::launcher {
namespace {

// The median of `sorted` (ascending) without its element at `skip`: O(1), so judging N ranks against
// the others costs N log N, not N squared.
double median_without(const std::vector<double>& sorted, size_t skip) {
  const auto at = [&](size_t k) { return sorted[k < skip ? k : k + 1]; };
  const size_t n = sorted.size() - 1;
  return n % 2 ? at(n / 2) : (at(n / 2 - 1) + at(n / 2)) / 2;
}

bool slower(double busy_ms, double reference_ms, double factor) {
  return busy_ms >= factor * reference_ms && busy_ms - reference_ms >= StragglerDetector::kMinExcessMs;
}

}  // namespace

std::vector<StragglerDetector::Change> StragglerDetector::observe(int rank, long step, double busy_ms,
                                                                 double seen_s) {
  std::vector<Change> changes;
  RankState& state = ranks_[rank];
  if (step <= state.last_step) return changes;  // a beat without a new step
  state.last_step = step;
  state.window.push_back({step, busy_ms, seen_s});
  if (state.window.size() > kWindow) state.window.pop_front();
  // The newest step that every rank has finished: judge it once, when every window is full.
  long complete = step;
  bool full = true;
  for (const auto& [r, s] : ranks_) {
    complete = std::min(complete, s.last_step);
    full = full && s.window.size() == kWindow;
  }
  if (ranks_.size() >= 2 && full && complete > judged_step_) judge(complete, seen_s, changes);
  return changes;
}

void StragglerDetector::new_attempt() {
  ranks_.clear();
  judged_step_ = 0;
}

// Where the slow steps began: walking back from the newest sample, each slow one counts +1 and each
// fast one -1; the step where that sum peaks (the oldest such, a slow one: where slow and fast steps
// alternate, the slowdown began before the newest). A spike some fast steps before the slowdown does
// not pull the date back, as the fast steps in between outweigh it.
const StragglerDetector::Sample& StragglerDetector::slow_since(const RankState& state, double reference) const {
  const Sample* since = &state.window.back();
  long sum = 0, best = 0;
  for (auto it = state.window.rbegin(); it != state.window.rend(); ++it) {
    sum += slower(it->busy_ms, reference, kSlowAt) ? 1 : -1;
    if (sum >= best && sum > 0) {
      best = sum;
      since = &*it;
    }
  }
  return *since;
}

void StragglerDetector::judge(long step, double now_s, std::vector<Change>& changes) {
  judged_step_ = step;
  std::map<int, std::vector<double>> sorted;  // each rank's window, ascending
  std::map<int, double> medians;
  std::vector<double> all;  // every rank's window median, ascending
  for (const auto& [rank, s] : ranks_) {
    std::vector<double>& busy = sorted[rank];
    for (const Sample& sample : s.window) busy.push_back(sample.busy_ms);
    std::sort(busy.begin(), busy.end());
    all.push_back(medians[rank] = (busy[kWindow / 2 - 1] + busy[kWindow / 2]) / 2);
  }
  std::sort(all.begin(), all.end());
  for (auto& [rank, s] : ranks_) {
    const double own = medians[rank];
    const auto mine = std::lower_bound(all.begin(), all.end(), own);  // equal medians: any one of them
    const double reference = median_without(all, static_cast<size_t>(mine - all.begin()));
    if (reference <= 0) continue;
    const double ratio = own / reference;
    const bool slow = slower(own, reference, kSlowAt);
    if (s.episode < 0 && !s.pending) {
      if (!slow) continue;
      const Sample& since = slow_since(s, reference);
      s.pending = Episode{.rank = rank, .first_step = since.step, .first_seen_s = since.seen_s, .recovered_step = {}};
    }
    Episode& episode = s.episode >= 0 ? episodes_[static_cast<size_t>(s.episode)] : *s.pending;
    if (slow) {
      episode.excess_sum += ratio - 1;
      ++episode.judged;
    }
    // The kRecoveredFast-th fastest busy time: below the bar, that many are.
    if (!slower(sorted[rank][kRecoveredFast - 1], reference, kRecoveredBelow)) {
      if (s.episode >= 0) {
        episode.recovered_step = step;
        s.episode = -1;
        changes.push_back({rank,
                           fmt::format("rank {} recovered at step {}: median busy time {:.1f} ms per step over its "
                                       "last {} steps, the other ranks' {:.1f} ms (a straggler since step {}, {:.0f}% "
                                       "slower)",
                                       rank, step, own, kWindow, reference, episode.first_step,
                                       100 * episode.slower_by()),
                           false});
      }
      s.pending.reset();  // slow for less than kMinSlowS: not a straggler
      continue;
    }
    if (!s.pending || !slow || now_s - s.pending->first_seen_s < kMinSlowS) continue;
    s.pending->warned_step = step;
    s.episode = static_cast<int>(episodes_.size());
    episodes_.push_back(*s.pending);
    s.pending.reset();
    changes.push_back({rank,
                       fmt::format("rank {} is a straggler: {:.0f}% slower than the other ranks since step {} "
                                   "(median busy time {:.1f} ms per step over its last {} steps, theirs {:.1f} ms)",
                                   rank, 100 * (ratio - 1), episodes_.back().first_step, own, kWindow, reference),
                       true});
  }
}

nlohmann::json StragglerDetector::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const Episode& e : episodes_) {
    nlohmann::json entry = {{"rank", e.rank},
                            {"first_step", e.first_step},
                            {"warned_step", e.warned_step},
                            {"slower_by", e.slower_by()}};
    if (e.recovered_step) entry["recovered_step"] = *e.recovered_step;
    out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace xtrain::launcher
