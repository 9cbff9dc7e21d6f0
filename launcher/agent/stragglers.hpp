// Straggler detection from the busy times in the heartbeat records (worker/train/trainer.hpp: a rank's
// step time minus its time blocked in collectives; wall times are all equal in synchronous data
// parallelism). Real slowness (a busy core, a throttled GPU, a slow link) is slow on average and noisy
// from step to step, so each rank is judged on a window: the median of its last kWindow busy times,
// against the reference, the median of the other ranks' window medians (with two ranks: the other
// rank's). A rank whose window median is at least kSlowAt times the reference (and kMinExcessMs above
// it: below that, scheduling noise), and has been slow for at least kMinSlowS, is a straggler: one
// warning, and an entry in state.json and summary.json ("stragglers"). It has recovered once
// kRecoveredFast of its kWindow busy times are below kRecoveredBelow times the reference (or within
// kMinExcessMs of it): one line, and the entry's recovered_step; falling behind again makes a new
// entry. Both gaps, in how slow and in how many, keep a rank that is slow at some steps and not at
// others from flapping. A slowdown that recovers within kMinSlowS of its start is not reported at all.
//
// What that guarantees: a median moves only when more than half of the window moves, however far
// single samples lie. A rank at least kSlowAt times slower than the others at every step is reported
// within kWindow / 2 + 1 steps of becoming slow (17), one slow at two steps of three within about 30,
// and in either case not before kMinSlowS has passed since (which only steps shorter than 60 ms
// notice); a rank whose slow steps are a minority of its window (noise, a stall now and then) never
// is. Recovery takes kRecoveredFast fast steps (24), and a rank slow at two steps of three does not
// recover by chance (that needs 24 fast steps of 32 where 11 are expected: about once in a million
// steps).
//
// The busy times come from rank 0's record, every rank's of one step (the end-of-step all-reduce
// brings them to rank 0): node 0's xlaunch judges every rank of the job, on whichever node, and the
// other nodes none. The supervisor reads the record at each of rank 0's heartbeats (inotify), so a
// window holds the steps that were read, which under load may skip some.
#pragma once

#include <cstddef>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

class StragglerDetector {
 public:
  static constexpr size_t kWindow = 32;         // busy times per rank that it is judged on
  // Window median / reference: a straggler from here. Two identical ranks pinned to their own cores of
  // an idle 2-core VM were 1.4-1.6x apart for dozens of steps while their busy times still counted the
  // time Gloo's threads took from backward (worker/train/busy_clock.hpp takes it out); a busy loop on
  // one rank's core makes it 1.6-1.9x.
  static constexpr double kSlowAt = 1.4;
  static constexpr double kRecoveredBelow = 1.2;
  static constexpr size_t kRecoveredFast = 3 * kWindow / 4;  // three quarters of the window
  static_assert(kWindow % 2 == 0, "the median is the mean of the middle pair");
  static constexpr double kMinExcessMs = 1.0;
  // How long a rank must have been slow before it is reported. On a virtual machine the host can run
  // one virtual core 1.3-1.9x slower than another with nothing inside the guest to show for it:
  // scripts/bench/core_drift.py on an idle 2-core VM found 32-sample median ratios of 1.4x or more in
  // episodes of up to 38 samples of 6.6 ms (within the hour, up to 135 of 5 ms), and in idle
  // 2,000-step runs of two pinned ranks (tests/launcher/stragglers_contention_test.py) the slow rank's
  // training thread needed 1.35-1.5x the other's CPU for the same work, for 0.4-1.2 s from onset to
  // recovery. Longer ones are reported: the rank is slower. A second of slowness is nothing an
  // operator acts on either, and steps of 60 ms or more take that long to tip the window anyway.
  static constexpr double kMinSlowS = 1.0;

  // A line for the log when a rank becomes a straggler or recovers; empty otherwise.
  struct Change {
    int rank;
    std::string message;
    bool warning = false;  // a new straggler (else a recovery)
  };

  // Rank `rank` finished step `step` with `busy_ms`, read at `seen_s` (seconds on a steady clock).
  // Returns what changed, if anything.
  std::vector<Change> observe(int rank, long step, double busy_ms, double seen_s);
  // A restarted gang counts its steps again (from its checkpoint): the windows start empty; the
  // episodes found so far stay (one still open has no recovered_step).
  void new_attempt();

  // [{"rank": R, "first_step": S, "warned_step": W, "slower_by": 0.7, "recovered_step": E}], in the
  // order they were found. first_step: where the slow steps began (the step of the window from which on
  // slow steps most outnumber fast ones); warned_step: the step judged when it was reported; slower_by:
  // the mean of the window median's fraction above the reference over the steps judged since then
  // while it was still at least kSlowAt; recovered_step only once it has recovered.
  nlohmann::json to_json() const;
  bool empty() const { return episodes_.empty(); }

 private:
  struct Sample {
    long step;
    double busy_ms;
    double seen_s;
  };
  struct Episode {
    int rank;
    long first_step;
    double first_seen_s;    // when first_step's busy time was read
    long warned_step = 0;   // 0 until reported
    double excess_sum = 0;  // of window median / reference - 1, over the steps judged slow since the tip
    long judged = 0;
    std::optional<long> recovered_step;
    double slower_by() const { return judged > 0 ? excess_sum / static_cast<double>(judged) : 0; }
  };
  struct RankState {
    long last_step = 0;              // of the latest busy time seen
    std::deque<Sample> window;       // the latest kWindow samples, oldest first
    std::optional<Episode> pending;  // slow, for less than kMinSlowS so far: not reported yet
    int episode = -1;                // index in episodes_ while a reported straggler
  };

  void judge(long step, double now_s, std::vector<Change>& changes);
  const Sample& slow_since(const RankState& state, double reference) const;

  std::map<int, RankState> ranks_;
  long judged_step_ = 0;  // the last step judged
  std::vector<Episode> episodes_;
};

}  // namespace xtrain::launcher
