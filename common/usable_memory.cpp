#include "common/usable_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

namespace xtrain {
namespace {

// A limit file's number of bytes; nullopt for "max" or anything else.
std::optional<std::uint64_t> read_limit(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string text;
  const auto digit = [](unsigned char c) { return std::isdigit(c) != 0; };
  if (!(in >> text) || !std::all_of(text.begin(), text.end(), digit)) return std::nullopt;
  try {
    return std::stoull(text);
  } catch (const std::out_of_range&) {  // beyond 64 bits: no limit
    return std::nullopt;
  }
}

// `dir` (relative to the hierarchy's root) and each directory above it, up to the root itself.
std::vector<std::filesystem::path> with_ancestors(const std::string& dir) {
  std::vector<std::filesystem::path> out;
  for (std::filesystem::path p = std::filesystem::path(dir).relative_path();; p = p.parent_path()) {
    out.push_back(p);
    if (p.empty()) break;
  }
  return out;
}

}  // namespace

std::optional<std::uint64_t> cgroup_memory_limit(const std::string& proc_self_cgroup,
                                                  const std::filesystem::path& cgroup_root) {
  std::optional<std::uint64_t> least;
  const auto consider = [&](const std::filesystem::path& file) {
    const std::optional<std::uint64_t> limit = read_limit(file);
    if (limit && (!least || *limit < *least)) least = limit;
  };
  // Each line: hierarchy-ID:controllers:path. v2's is "0::path"; v1's memory line names "memory".
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    std::istringstream names(controllers);
    std::string name;
    bool memory = false;
    while (std::getline(names, name, ',')) memory = memory || name == "memory";
    for (const std::filesystem::path& dir : with_ancestors(path)) {
      if (controllers.empty()) consider(cgroup_root / dir / "memory.max");
      if (memory) consider(cgroup_root / "memory" / dir / "memory.limit_in_bytes");
    }
  }
  return least;
}

std::uint64_t usable_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const std::uint64_t physical =
      pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  const std::optional<std::uint64_t> limit = cgroup_memory_limit(text.str(), "/sys/fs/cgroup");
  if (physical == 0) return limit.value_or(0);
  return limit ? std::min(physical, *limit) : physical;
}

}  // namespace xtrain
