// What `xlaunch status` reads at the moment it is asked, on top of state.json or summary.json:
// each rank's progress record and heartbeat age (ranks/rank-R.heartbeat), and whether the
// processes that state.json lists as running still exist. A supervisor that was killed (SIGKILL,
// a node that rebooted) leaves a state.json that says "running" forever; its ranks are checked by
// pid and /proc start time, so a pid reused by another process is not taken for the rank.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

// `run` with, added:
//   "progress": {"step", "total_steps", "loss", "tokens_per_s", "eta_s"} from the lowest rank's
//               record, or null when no rank keeps one;
//   per rank:   "heartbeat_age_s" (null without a heartbeat file), "phase" (the record, see
//               common/heartbeat_record.hpp to_json, or null), "alive" (for ranks recorded as
//               running: whether that process still exists), and "status": "gone" for a rank
//               recorded as running whose process does not.
nlohmann::json with_live_state(const std::string& run_dir, nlohmann::json run);

}  // namespace xtrain::launcher
