#include "launcher/plan/checkpoint_space.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <spdlog/spdlog.h>

#include "common/checkpoint_dirs.hpp"
#include "common/number_format.hpp"
#include "launcher/run/run_dir.hpp"
#include "worker/train/checkpoint.hpp"

namespace xtrain::launcher {

namespace fs = std::filesystem;

std::int64_t checkpoints_written(std::int64_t start, std::int64_t steps, int every) {
  if (steps <= start) return 0;
  if (every <= 0) return 1;
  const std::int64_t multiples = steps / every - start / every;
  return multiples + (steps % every != 0 ? 1 : 0);
}

std::int64_t new_checkpoints_at(std::int64_t k, std::int64_t existing, int keep) {
  // Before the k-th write the rotation has left min(keep, existing + k - 1) of them.
  const std::int64_t older = std::min<std::int64_t>(std::max(keep, 1), existing + k - 1);
  return std::max<std::int64_t>(1, older + 1 - existing);
}

std::int64_t checkpoint_step_of(std::int64_t k, std::int64_t start, std::int64_t steps, int every) {
  if (every <= 0) return steps;
  return std::min(steps, (start / every + k) * every);
}

void warn_about_checkpoint_space(const Plan& plan) {
  const JobSpec& spec = plan.spec;
  if (!plan.own_worker || spec.nodes.node_rank != 0) return;
  const std::int64_t start = plan.start_step;
  const std::int64_t written = checkpoints_written(start, spec.train.steps, spec.checkpoint.every);
  // Those of later steps are moved aside: still on the disk, out of the rotation.
  const auto existing = static_cast<std::int64_t>(complete_checkpoints(fs::path(plan.run_dir) / "checkpoints").size() -
                                                  (plan.superseded ? plan.superseded->dirs.size() : 0));
  std::error_code ec;
  const fs::space_info space = fs::space(existing_ancestor(plan.run_dir), ec);
  if (ec || written == 0) return;
  const std::uint64_t each = checkpoint_tensor_bytes(ModelDims::from(spec.model));
  // The need grows with each write until the rotation caps it: the first write it outgrows fails.
  const std::int64_t last = std::min<std::int64_t>(written, std::max(spec.checkpoint.keep, 1) + 1);
  for (std::int64_t k = 1; k <= last; ++k) {
    const std::uint64_t need = static_cast<std::uint64_t>(new_checkpoints_at(k, existing, spec.checkpoint.keep)) * each;
    if (need <= space.available) continue;
    spdlog::warn("the run dir's file system has {} free, but this run's checkpoints of {} each take {} more by "
                 "step {} (checkpoint.keep {}, and each new one written before the oldest goes), so that "
                 "checkpoint would fail with the disk full: free space, lower checkpoint.keep, or give the run "
                 "another run_dir",
                 format_bytes(space.available), format_bytes(each), format_bytes(need),
                 checkpoint_step_of(k, start, spec.train.steps, spec.checkpoint.every), spec.checkpoint.keep);
    return;
  }
}

}  // namespace xtrain::launcher
