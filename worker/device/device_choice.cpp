#include "worker/device/device_choice.hpp"

#include <cstdlib>

#include <spdlog/spdlog.h>

#include "common/bad_input.hpp"
#include "common/cuda_interpret.hpp"
#include "common/gpu/gpu_probe.hpp"
#include "common/usable_memory.hpp"
#include "worker/cpu/cpu_backend.hpp"
#include "worker/device/cuda_plugin_loader.hpp"
#include "worker/model/cuda_buffers.hpp"
#include "worker/comm/gloo_communicator.hpp"
#include "worker/comm/single_communicator.hpp"

namespace xtrain {
namespace {

// What train.deterministic false does here, for the device line: only the bf16 CUDA attention
// backward has an order-free path. Elsewhere the setting changes nothing, which whoever set it
// should read rather than assume the faster path.
std::string determinism_note(bool deterministic, bool dq_by_atomics) {
  if (deterministic) return "";
  if (dq_by_atomics) {
    return "; train.deterministic false: the attention backward sums dQ by atomics (not bitwise reproducible)";
  }
  return "; train.deterministic false changes nothing here (only bf16 on CUDA has a path without a fixed order)";
}

DeviceChoice on_cpu(const JobSpec& spec, const std::string& why, bool degraded) {
  DeviceChoice choice;
  choice.precision = resolve_precision(spec.train, "cpu");
  const int threads = cpu_backend_threads();
  choice.where = why;
  choice.summary = why + "; " + precision_name(choice.precision) + "; " + std::to_string(threads) +
                   (threads == 1 ? " thread" : " threads") + determinism_note(spec.train.deterministic, false);
  choice.degraded = degraded;
  return choice;
}

// One GPU per rank: a local rank past the GPUs CUDA sees would share one with another rank (NCCL
// refuses that, and two trainings on one GPU would each get half of it), so it is refused.
// Interpret mode emulates one device per process: every rank has its own device 0.
int gpu_of_local_rank(int local_rank, int visible, bool interpreted) {
  if (interpreted) return 0;
  if (local_rank < visible) return local_rank;
  const char* mask = std::getenv("CUDA_VISIBLE_DEVICES");
  throw SpecError("LOCAL_RANK", std::to_string(local_rank) + " needs GPU " + std::to_string(local_rank) +
                                    ", but CUDA sees " + std::to_string(visible) + " GPU" + (visible == 1 ? "" : "s") +
                                    (mask != nullptr ? " (CUDA_VISIBLE_DEVICES=\"" + std::string(mask) + "\")"
                                                     : std::string(" (CUDA_VISIBLE_DEVICES unset)")) +
                                    "; run at most " + std::to_string(visible) + " ranks per node (nproc_per_node)");
}

}  // namespace

DeviceProbe DeviceProbe::of_this_machine() {
  return {count_nvidia_gpus(), cuda_plugin_path(), cuda_interpret_requested()};
}

void require_precision_support(Precision precision, const CudaDeviceInfo& gpu) {
  if (precision == Precision::bf16 && gpu.major < 8) {
    throw SpecError("train.precision", "\"bf16\" (what \"auto\" means on CUDA) needs a GPU of compute capability "
                                       "8.0 or newer; " + gpu.name + " is " + std::to_string(gpu.major) + "." +
                                           std::to_string(gpu.minor) + " (use \"fp32\")");
  }
}

namespace {

// choose_device, with `work` ("training", "generating", "scoring") for what its summary says.
DeviceChoice choose(const JobSpec& spec, int local_rank, const DeviceProbe& probe, const std::string& work) {
  if (spec.device == "cpu") return on_cpu(spec, "device cpu: " + work + " on the CPU", /*degraded=*/false);
  const bool required = spec.device == "cuda";
  if (!required && probe.nvidia_gpus == 0 && !probe.interpret) {
    return on_cpu(spec, "device auto: " + work + " on the CPU (no NVIDIA GPU on this machine: no CUDA library loaded)",
                  /*degraded=*/false);
  }
  // From here on "auto" falls back to the CPU where "cuda" fails, for the same reason.
  auto unusable = [&](const std::string& why) {
    if (required) throw SpecError("device", "\"cuda\" asked for, but " + why);
    return on_cpu(spec, "device auto: " + work + " on the CPU (" + why + ")", /*degraded=*/true);
  };
  const CudaPluginLoad load = load_cuda_plugin(probe.plugin_path);
  if (load.plugin == nullptr) return unusable(load.failure);
  const CudaDeviceCount devices = load.plugin->device_count();
  if (!devices.error.empty()) return unusable("CUDA cannot count the GPUs: " + devices.error);
  if (devices.count == 0) return unusable("CUDA sees no GPU (" + load.plugin->versions() + ")");

  DeviceChoice choice;
  choice.cuda = load.plugin;
  choice.interpreted = load.plugin->interpreted();
  choice.gpu = gpu_of_local_rank(local_rank, devices.count, choice.interpreted);
  choice.precision = resolve_precision(spec.train, "cuda");
  const CudaDeviceInfo gpu = load.plugin->device_info(choice.gpu);
  require_precision_support(choice.precision, gpu);
  choice.gpu_memory = {"GPU " + std::to_string(choice.gpu) + " (" + gpu.name + ")", gpu.free_bytes, gpu.total_bytes};
  choice.deterministic = spec.train.deterministic;
  choice.where = "device " + spec.device + ": " + work + " on " + gpu.describe(choice.gpu);
  choice.summary = choice.where + "; " + load.plugin->versions() +
                   "; " + load.nccl + "; " + precision_name(choice.precision) +
                   determinism_note(choice.deterministic,
                                    cuda_buffers::attention_dq_by_atomics(choice.precision, choice.deterministic));
  return choice;
}

}  // namespace

DeviceChoice choose_device(const JobSpec& spec, int local_rank, const DeviceProbe& probe) {
  return choose(spec, local_rank, probe, "training");
}

void log_device_line(const DeviceChoice& choice, const std::string& line) {
  if (choice.degraded) {
    spdlog::warn("{}", line);
  } else {
    spdlog::info("{}", line);
  }
}

void check_command_device_flags(const std::string& device, const std::string& precision) {
  if (device != "cpu" && device != "cuda" && device != "auto") {
    throw BadInput("--device: expected \"cpu\", \"cuda\" or \"auto\", got \"" + device + "\"");
  }
  if (precision != "auto" && precision != "fp32" && precision != "tf32" && precision != "bf16") {
    throw BadInput("--precision: expected \"auto\", \"fp32\", \"tf32\" or \"bf16\", got \"" + precision + "\"");
  }
}

DeviceChoice choose_command_device(const std::string& device, const std::string& precision, const std::string& work,
                                   const DeviceProbe& probe) {
  check_command_device_flags(device, precision);
  JobSpec spec;
  spec.device = device;
  spec.train.precision = precision;
  spec.train.deterministic = true;
  try {
    return choose(spec, /*local_rank=*/0, probe, work);
  } catch (const SpecError& e) {  // the message names the spec's field: name the flag instead
    const std::string flag = e.path() == "device" ? "--device" : e.path() == "train.precision" ? "--precision" : "";
    if (flag.empty()) throw;
    throw BadInput(flag + ": " + std::string(e.what()).substr(e.path().size() + 2));
  }
}

void require_memory_fit(const DeviceChoice& device, const JobSpec& spec, int world_size, int local_ranks) {
  if (device.cuda == nullptr) {
    const std::uint64_t usable = usable_memory_bytes();  // 0: not known, nothing to check against
    if (usable > 0) {
      check_host_memory_fit(spec.model, spec.train.micro_batch_size, world_size, local_ranks, device.precision,
                            static_cast<size_t>(usable));
    }
    return;
  }
  check_memory_fit(spec.model, spec.train.micro_batch_size, world_size, device.precision,
                   spec.train.deterministic, device.gpu_memory);
}

int fit_command_batch(const DeviceChoice& device, const ModelSpec& model, int batch, int needed, ModelUse use) {
  if (device.cuda == nullptr) {
    const std::uint64_t usable = usable_memory_bytes();  // 0: not known, nothing to hold it to
    if (usable == 0) return batch;
    return fit_host_inference_batch(model, batch, needed, device.precision, static_cast<size_t>(usable), use);
  }
  return fit_inference_batch(model, batch, needed, device.precision, device.deterministic, device.gpu_memory, use);
}

std::unique_ptr<Backend> make_backend(const DeviceChoice& device) {
  if (device.cuda == nullptr) return std::make_unique<CpuBackend>(device.precision);
  return device.cuda->make_backend(device.gpu, precision_name(device.precision), device.deterministic);
}

std::unique_ptr<Communicator> make_communicator(const DeviceChoice& device, const JobSpec& spec,
                                                const WorkerEnv& env, Backend& backend) {
  // Interpret mode's device memory is host memory: its ranks reduce with Gloo as CPU ranks do,
  // unless the spec names interpret mode's NCCL.
  const bool on_gpu = device.cuda != nullptr && !device.interpreted;
  if (spec.backend == "gloo" && on_gpu) {
    throw SpecError("backend", "\"gloo\" reduces host memory; with device \"cuda\" use \"nccl\" or \"auto\"");
  }
  if (spec.backend == "nccl" && device.cuda == nullptr) {
    throw SpecError("backend", "\"nccl\" needs device \"cuda\"; CPU ranks use \"gloo\" or \"auto\"");
  }
  if (env.where.world_size == 1) return std::make_unique<SingleCommunicator>();
  const double timeout_s = spec.nodes.rdzv_timeout_s;
  if (on_gpu || spec.backend == "nccl") return device.cuda->make_nccl_communicator(env, backend, timeout_s);
  auto gloo = make_gloo_communicator(env, timeout_s);
  // Gloo reduces interpret mode's device memory only in the stream's order, as NCCL would.
  if (device.cuda != nullptr) return device.cuda->order_on_stream(std::move(gloo), backend);
  return gloo;
}

}  // namespace xtrain
