#include "common/checkpoint_dirs.hpp"

#include <algorithm>
#include <cstdio>

namespace xtrain {

std::string checkpoint_dir_name(std::int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%08lld", static_cast<long long>(step));
  return buf;
}

std::optional<std::int64_t> checkpoint_step(const std::string& name) {
  if (name.size() < 13 || name.rfind("step-", 0) != 0) return std::nullopt;
  std::int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || i > 22) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

bool is_partial_checkpoint(const std::string& name) {
  return name.rfind("step-", 0) == 0 && name.find(kCheckpointTmpMarker) != std::string::npos;
}

std::vector<std::pair<std::int64_t, std::filesystem::path>> complete_checkpoints(const std::filesystem::path& root) {
  std::vector<std::pair<std::int64_t, std::filesystem::path>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root, ec)) {
    const auto step = checkpoint_step(entry.path().filename().string());
    if (step && entry.is_directory()) found.emplace_back(*step, entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return found;
}

bool holds_a_run(const std::filesystem::path& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir / "checkpoints", ec) || std::filesystem::exists(dir / "summary.json", ec);
}

std::optional<std::string> describe_checkpoint_holder(const std::filesystem::path& dir) {
  const bool run_dir = holds_a_run(dir);
  const auto held = complete_checkpoints(run_dir ? dir / "checkpoints" : dir);
  if (!run_dir && held.empty()) return std::nullopt;
  const std::string what = run_dir ? "a run directory" : "a run's checkpoints/ folder";
  if (held.empty()) return what + " without a complete checkpoint";
  return what + ", whose newest checkpoint is " + held.front().second.string();
}

std::uint64_t checkpoint_bytes(const std::filesystem::path& dir) {
  std::uint64_t bytes = 0;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ignored)) {
    if (entry.is_regular_file(ignored)) bytes += entry.file_size(ignored);
  }
  return bytes;
}

}  // namespace xtrain
