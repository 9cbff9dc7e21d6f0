// How much memory this process may use: the machine's physical memory, or less where a cgroup
// limits it (a container's, a Kubernetes pod's or a SLURM job's memory limit), which is what the
// kernel's out-of-memory killer holds the process to. The cgroup the process is in and every
// cgroup above it count: cgroup v2's memory.max, v1's memory.limit_in_bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace xtrain {

std::uint64_t usable_memory_bytes();

// The smallest memory limit that the cgroups named in `proc_self_cgroup` (the text of
// /proc/self/cgroup) and their ancestors set under `cgroup_root` (the cgroup filesystem, normally
// /sys/fs/cgroup); the root's own files count too, as a container sees its cgroup there. nullopt
// where none sets one ("max", or a file that is missing or not a number).
std::optional<std::uint64_t> cgroup_memory_limit(const std::string& proc_self_cgroup,
                                                  const std::filesystem::path& cgroup_root);

}  // namespace xtrain
