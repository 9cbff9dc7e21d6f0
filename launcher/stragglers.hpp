// Straggler detection from the busy times in the heartbeat records (worker/train/trainer.hpp: a rank's
// step time minus its time blocked in collectives; wall times are all equal in synchronous data
// parallelism). For each step that every reporting rank has finished, a rank whose busy time is
// at least kSlowerBy above the median of this node's ranks (and kMinExcessMs above it: below
// that, scheduling noise) is slow at that step; kStreak slow steps in a row make it a straggler:
// one warning, and an entry in state.json and summary.json ("stragglers"). A straggler with
// kRecoverSteps fast steps in a row has recovered (one line); falling behind again makes a new
// entry. (One fast step in a slow run is noise, so it does not end the run either.)
//
// The supervisor sees a rank's record at each heartbeat (inotify), so steps that pass between two
// reads are judged by the newer value. Only this node's ranks are compared.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

class StragglerDetector {
 public:
  static constexpr double kSlowerBy = 0.2;
  static constexpr double kMinExcessMs = 1.0;
  static constexpr long kStreak = 20;
  static constexpr long kRecoverSteps = 5;

  // A line for the log when a rank becomes a straggler or recovers; empty otherwise.
  struct Change {
    std::string message;
    bool warning = false;  // a new straggler (else a recovery)
  };

  // Rank `rank` finished step `step` with `busy_ms`. Returns what changed, if anything.
  std::vector<Change> observe(int rank, long step, double busy_ms);
  // A restarted gang counts its steps again (from its checkpoint); the episodes found so far stay.
  void new_attempt();

  // [{"rank": R, "first_step": S, "slower_by": 0.35}], in the order they were found; slower_by is
  // the mean fraction above the median over the straggling steps so far.
  nlohmann::json to_json() const;
  bool empty() const { return episodes_.empty(); }

 private:
  struct RankState {
    long last_step = 0;   // of the latest busy time seen
    double busy_ms = 0;
    long slow_since = 0;  // first step of the current slow run; 0: not slow
    double ratio_sum = 0; // over the slow steps of the run
    long slow_steps = 0;
    long fast_steps = 0;  // fast steps in a row since the last slow one
    int episode = -1;     // index in episodes_ while flagged
  };
  struct Episode {
    int rank;
    long first_step;
    double slower_by;
  };

  void judge(long step, std::vector<Change>& changes);

  std::map<int, RankState> ranks_;
  long judged_step_ = 0;  // the last step judged
  std::vector<Episode> episodes_;
};

}  // namespace xtrain::launcher
