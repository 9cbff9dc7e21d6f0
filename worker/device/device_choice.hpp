// Which device a rank computes on (the spec's `device`), and its backend and communicator.
//   "cpu":  the CPU backend; nothing of CUDA is looked at.
//   "cuda": the CUDA plugin (worker/device/cuda_plugin_loader.hpp) must load and CUDA must see a GPU;
//           otherwise a SpecError naming `device` and the cause (exit 2), before anything is
//           written.
//   "auto": the plugin is tried only where the NVIDIA driver shows GPUs (common/gpu/gpu_probe.hpp),
//           so a machine without them loads no CUDA library at all. A missing or failing plugin,
//           or CUDA seeing no GPU, means the CPU, said in the choice's one log line.
// On a GPU the precision is checked against the GPU before the backend exists, and LOCAL_RANK
// against the GPUs CUDA sees: one GPU per rank, else a SpecError naming LOCAL_RANK, the count
// and CUDA_VISIBLE_DEVICES (exit 2).
#pragma once

#include <memory>
#include <string>

#include "common/job_spec.hpp"
#include "common/worker_env.hpp"
#include "worker/model/backend.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/device/cuda_plugin.hpp"
#include "worker/model/memory_plan.hpp"

namespace xtrain {

// What the choice looks at; the tests make their own.
struct DeviceProbe {
  int nvidia_gpus = 0;      // GPUs the driver shows on this machine
  std::string plugin_path;  // where the CUDA plugin is
  bool interpret = false;   // XTRAIN_CUDA_INTERPRET=1 (common/cuda_interpret.hpp): "auto" means CUDA too

  static DeviceProbe of_this_machine();
};

struct DeviceChoice {
  const CudaPlugin* cuda = nullptr;  // null: the CPU
  int gpu = -1;                      // on CUDA: LOCAL_RANK (interpret mode: 0, its one device)
  GpuMemory gpu_memory;              // on CUDA: its name and memory, free and in all
  Precision precision = Precision::fp32;  // train.precision resolved for the device
  bool deterministic = true;              // on CUDA: train.deterministic, for the backend
  std::string summary;               // one log line: the device, and why
  std::string where;                 // its first part: the device, and why ("device auto: training on the CPU (...)")
  bool interpreted = false;          // interpret mode's plugin: Gloo reduces unless the spec names NCCL
  bool degraded = false;             // "auto" on a machine with GPUs it cannot use: log a warning
};

DeviceChoice choose_device(const JobSpec& spec, int local_rank, const DeviceProbe& probe);

// Logs `line` (the choice's summary, or a command's own line about it): a warning when "auto"
// could not use the machine's GPUs, else information.
void log_device_line(const DeviceChoice& choice, const std::string& line);

// The same choice for a command that runs a model forward only (generate, eval), from its
// --device ("cpu", "cuda", "auto") and --precision ("auto", "fp32", "tf32", "bf16"), which mean
// what the spec's device and train.precision mean, on GPU 0 of those CUDA sees. A bad value, a
// precision the device cannot do, or "cuda" that cannot be had is BadInput (common/bad_input.hpp)
// naming the flag. `work` ("generating", "scoring") is what the summary says is done there.
DeviceChoice choose_command_device(const std::string& device, const std::string& precision, const std::string& work,
                                   const DeviceProbe& probe);
// Only the words of the two flags, as the command line is read: BadInput naming the flag.
void check_command_device_flags(const std::string& device, const std::string& precision);

// Throws SpecError naming train.precision when `precision` needs more than `gpu` has: bf16
// tensor cores need compute capability 8.0 (Ampere). TF32 is a permission, not a need: before
// sm_80 cuBLAS computes those products in fp32.
void require_precision_support(Precision precision, const CudaDeviceInfo& gpu);

// Throws SpecError naming train.micro_batch_size when the memory plan of this rank
// (worker/model/memory_plan.hpp, with `world_size` ranks) does not fit, with the plan's numbers and
// the largest micro-batch that fits. On a GPU: its free memory. On the CPU: the plans of the
// `local_ranks` ranks on this machine together, against what its processes may use (physical
// memory or the cgroup's limit); xlaunch checks the same before it starts them, this is for a
// worker run by hand or by another launcher. Run before the backend allocates anything.
void require_memory_fit(const DeviceChoice& device, const JobSpec& spec, int world_size, int local_ranks);

// For a command's model (eval's GPT built for inference, generate's for decoding: `use`): the most
// sequences, up to `batch`, that fit the GPU's free memory, or on the CPU the memory this process
// may use (worker/model/memory_plan.hpp's fit_inference_batch, fit_host_inference_batch); BadInput
// naming --device when fewer than `needed` do.
int fit_command_batch(const DeviceChoice& device, const ModelSpec& model, int batch, int needed = 1,
                      ModelUse use = ModelUse::kInference);

std::unique_ptr<Backend> make_backend(const DeviceChoice& device);

// spec.backend: gloo (host memory), nccl (device memory), or auto (the one that fits the device);
// a world of one needs neither.
std::unique_ptr<Communicator> make_communicator(const DeviceChoice& device, const JobSpec& spec,
                                                const WorkerEnv& env, Backend& backend);

}  // namespace xtrain
