#include "launcher/plan/relative_paths.hpp"

#include <glob.h>

#include <filesystem>
#include <utility>
#include <vector>

namespace xtrain::launcher {
namespace {

namespace fs = std::filesystem;

// Whether `path` (a file, a directory or a glob) names anything from `base`.
bool names_something(const fs::path& base, const std::string& path) {
  const std::string full = (base / path).string();
  if (!is_glob_pattern(path)) {
    std::error_code ec;
    return fs::exists(full, ec);
  }
  glob_t g{};
  const bool found = ::glob(glob_pattern_of(full).c_str(), 0, nullptr, &g) == 0 && g.gl_pathc > 0;
  ::globfree(&g);
  return found;
}

}  // namespace

void check_relative_paths(const JobSpec& spec, const std::string& job_path) {
  if (job_path.empty()) return;
  const bool resume_path = spec.checkpoint.resume != "auto" && spec.checkpoint.resume != "never";
  const std::vector<std::pair<const char*, std::string>> paths = {
      {"data.train", spec.data.train},
      {"data.val", spec.data.val},
      {"tokenizer", spec.tokenizer},
      {"model.init_from", spec.model.init_from},
      {"checkpoint.resume", resume_path ? spec.checkpoint.resume : ""},
      {"train.eval_multiple_choice", spec.train.eval_multiple_choice}};
  std::error_code ec;
  const fs::path here = fs::current_path(ec);
  if (ec) return;
  for (const auto& [field, path] : paths) {
    if (path.empty() || fs::path(path).is_absolute() || names_something(here, path)) continue;
    const fs::path spec_dir = fs::absolute(job_path, ec).lexically_normal().parent_path();
    for (fs::path base = spec_dir; !ec && base.has_relative_path(); base = base.parent_path()) {
      if (base == here || !names_something(base, path)) continue;
      throw SpecError(field, path + " names nothing from the current directory (" + here.string() +
                                 "), which relative paths are read from; from " + base.string() + " (" +
                                 (base == spec_dir ? "the spec's directory" : "above the spec") + ") it names " +
                                 (base / path).string() + ": run xlaunch from there, or give the path from here");
    }
  }
}

}  // namespace xtrain::launcher
