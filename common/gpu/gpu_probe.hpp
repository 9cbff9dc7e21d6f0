// Whether this machine has NVIDIA GPUs, read from the driver's files alone: no CUDA library is
// loaded, so asking costs microseconds on any machine. xlaunch resolves `device: auto` and
// `nproc_per_node: auto` with it; xtrain-worker decides with it whether `device: auto` tries
// the CUDA plugin at all.
#pragma once

namespace xtrain {

// One directory per GPU under /proc/driver/nvidia/gpus; without the proc tree (some
// containers), the /dev/nvidiaN device nodes. 0 on a machine without the NVIDIA driver.
int count_nvidia_gpus();

}  // namespace xtrain
