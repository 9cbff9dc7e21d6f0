// Checkpoints of a run dir at later steps than the one a run starts from: another line of training
// (the run before a checkpoint.resume "never", or before a resume from an earlier checkpoint).
// Left where they are, they would outrank the run's own checkpoints: checkpoint.keep keeps the
// highest steps (so it would remove each new checkpoint as soon as it is written), and a later
// resume: auto or `generate RUN` would take the old run's model. xlaunch moves them aside, out of
// RUN/checkpoints, before the ranks start; nothing is deleted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xtrain::launcher {

struct SupersededCheckpoints {
  std::int64_t start_step = 0;     // where the run starts: the resumed checkpoint's step, or 0
  std::vector<std::string> dirs;   // RUN/checkpoints/step-N with N > start_step, oldest first
  std::string destination;         // RUN/superseded/<UTC time of the plan>, which they move into
};

// Those of `run_dir` (absolute) for a run starting at `start_step`; nullopt when there are none.
std::optional<SupersededCheckpoints> find_superseded_checkpoints(const std::string& run_dir, std::int64_t start_step);

// The one warning line: how many, which steps, where they go and why.
std::string describe(const SupersededCheckpoints& superseded);

// Moves each directory into `destination` (renames within the run dir: nothing is copied). Throws
// LaunchError (125) naming the path that could not be moved.
void set_aside(const SupersededCheckpoints& superseded);

}  // namespace xtrain::launcher
