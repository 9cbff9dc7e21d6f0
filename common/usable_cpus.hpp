// How many CPUs this process may run on: its affinity mask's count (what taskset, a cgroup cpuset,
// SLURM's or Kubernetes' CPU binding leave it), or the online CPUs where the mask cannot be read.
// The default of every "threads" or "cores" choice we make for a user, never the machine's total.
#pragma once

namespace xtrain {

unsigned usable_cpus();

}  // namespace xtrain
