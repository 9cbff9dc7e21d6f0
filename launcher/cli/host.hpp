// What xlaunch learns about the machine it runs on: GPUs, cores, its own location and
// environment. Tests build a HostInfo by hand to resolve plans for machines they are not on.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace xtrain::launcher {

struct HostInfo {
  int physical_gpus = 0;                            // NVIDIA devices the driver exposes
  std::optional<std::string> cuda_visible_devices;  // unset = all visible
  unsigned cores = 1;                               // CPUs this process may run on
  std::uint64_t memory_bytes = 0;                   // memory this process may use; 0: unknown
  std::string exe_dir;                              // directory of the running xlaunch
  std::map<std::string, std::string> environment;   // xlaunch's own, passed through to ranks
};

HostInfo probe_host();

// This process's environment (environ), name -> value.
std::map<std::string, std::string> process_environment();

// CUDA's rule: the list is read up to its first invalid entry (an index out of range, a
// repeated index, or anything else unparsable); "" and "-1" hide every GPU. GPU-/MIG- UUIDs
// count as valid since only the driver could check them.
int visible_gpus(int physical_gpus, const std::optional<std::string>& cuda_visible_devices);

}  // namespace xtrain::launcher
