#include "launcher/run/superseded_checkpoints.hpp"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <system_error>

#include "common/checkpoint_dirs.hpp"
#include "launcher/run/launch_error.hpp"

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;

std::string utc_now_compact() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &utc);
  return buf;
}

}  // namespace

std::optional<SupersededCheckpoints> find_superseded_checkpoints(const std::string& run_dir, std::int64_t start_step) {
  SupersededCheckpoints found;
  found.start_step = start_step;
  for (const auto& [step, dir] : complete_checkpoints(fs::path(run_dir) / "checkpoints")) {
    if (step > start_step) found.dirs.push_back(dir.string());
  }
  if (found.dirs.empty()) return std::nullopt;
  std::reverse(found.dirs.begin(), found.dirs.end());
  // A second set-aside within the same second (a short run started over twice) gets a name of its own.
  const std::string base = run_dir + "/superseded/" + utc_now_compact();
  found.destination = base;
  std::error_code ec;
  for (int n = 2; fs::exists(found.destination, ec); ++n) found.destination = base + "-" + std::to_string(n);
  return found;
}

std::string describe(const SupersededCheckpoints& superseded) {
  const auto name = [](const std::string& dir) { return fs::path(dir).filename().string(); };
  const size_t n = superseded.dirs.size();
  const std::string which = n == 1 ? name(superseded.dirs.front())
                                   : name(superseded.dirs.front()) + " to " + name(superseded.dirs.back());
  return "this run starts at step " + std::to_string(superseded.start_step) + ", so the run dir's " +
         std::to_string(n) + " checkpoint" + (n == 1 ? "" : "s") + " of later steps (" + which +
         "), which this run does not continue, move to " + superseded.destination +
         " when it starts: left in checkpoints/, checkpoint.keep would remove this run's own checkpoints in "
         "their favour and a later resume would take them; delete that directory once it is not needed";
}

void set_aside(const SupersededCheckpoints& superseded) {
  std::error_code ec;
  fs::create_directories(superseded.destination, ec);
  if (ec) launch_failure("cannot create " + superseded.destination + ": " + ec.message());
  for (const std::string& dir : superseded.dirs) {
    fs::rename(dir, fs::path(superseded.destination) / fs::path(dir).filename(), ec);
    if (ec) launch_failure("cannot move " + dir + " to " + superseded.destination + ": " + ec.message());
  }
}

}  // namespace xtrain::launcher
