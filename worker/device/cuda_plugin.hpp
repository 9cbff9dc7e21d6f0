// The boundary between xtrain-worker and the CUDA backend, which is a plugin: cuda/ builds
// lib/libxtrain-cuda.so, and the worker dlopens it (worker/device/cuda_plugin_loader.hpp) only when the
// device is, or may be, a GPU. The worker itself links no CUDA library, so it starts (and trains
// on the CPU) on a machine without any, and pays nothing for cuBLASLt when it does not use it.
//
// The ABI: one extern "C" symbol, xtrain_cuda_plugin, of type CudaPluginEntryFn. It returns the
// plugin's ABI version and interface digest, and the plugin object. The worker uses the object
// only when both match its own:
//   - kCudaPluginAbiVersion is bumped by hand whenever CudaPlugin below changes;
//   - the interface digest (build/generated/xtrain/plugin_interface.hpp) is a hash of every
//     header whose types cross the boundary (this one, Backend, Communicator, WorkerEnv, ...),
//     computed by CMake, so a plugin from a build with any other version of them is refused
//     rather than called through a vtable of another shape.
// Objects cross as C++ (same compiler, same libstdc++, as both digests guarantee one tree):
// the plugin's methods throw std::invalid_argument for bad input and std::runtime_error for
// failures, as the rest of the worker does. The plugin object lives as long as the process: the
// worker never dlcloses a plugin it uses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace xtrain {

class Backend;
class Communicator;
struct WorkerEnv;

inline constexpr std::uint32_t kCudaPluginAbiVersion = 3;
inline constexpr char kCudaPluginEntryPoint[] = "xtrain_cuda_plugin";
inline constexpr char kCudaPluginFileName[] = "libxtrain-cuda.so";

// How many GPUs CUDA offers this process, or why it cannot say.
struct CudaDeviceCount {
  int count = 0;
  // Empty when `count` is the answer (0 included: a driver without devices). Otherwise CUDA's
  // error and the driver and runtime versions, e.g. "cudaGetDeviceCount: cudaErrorInsufficientDriver
  // (CUDA driver version is insufficient for CUDA runtime version); driver CUDA 12.2, runtime CUDA 13.0".
  std::string error;
};

struct CudaDeviceInfo {
  std::string name;                 // "NVIDIA H200"
  int major = 0, minor = 0;         // compute capability: bf16 tensor cores need 8.0
  int multiprocessors = 0;
  std::size_t free_bytes = 0;       // device memory free now, and in all
  std::size_t total_bytes = 0;

  // "GPU 0: NVIDIA H200, sm_90, 132 SMs, 139.2 of 139.8 GiB free"
  std::string describe(int device) const {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    char memory[64];
    std::snprintf(memory, sizeof memory, "%.1f of %.1f GiB free", static_cast<double>(free_bytes) / kGiB,
                  static_cast<double>(total_bytes) / kGiB);
    return "GPU " + std::to_string(device) + ": " + name + ", sm_" + std::to_string(major) +
           std::to_string(minor) + ", " + std::to_string(multiprocessors) + " SMs, " + memory;
  }
};

class CudaPlugin {
 public:
  virtual CudaDeviceCount device_count() const = 0;
  // Throws std::invalid_argument for a device that is not there. Makes `device` the current one.
  virtual CudaDeviceInfo device_info(int device) const = 0;
  // "driver CUDA 12.8, runtime CUDA 13.0", for the log.
  virtual std::string versions() const = 0;
  // The backend on GPU `device` in `precision`, the resolved value of the spec's train.precision
  // ("bf16", "tf32" or "fp32", precision_name's words), with the spec's train.deterministic.
  // Throws std::invalid_argument for a device that is not visible or a precision it does not know.
  virtual std::unique_ptr<Backend> make_backend(int device, const std::string& precision,
                                                bool deterministic) const = 0;
  // The NCCL communicator of this rank on `backend` (made by make_backend). Throws
  // std::invalid_argument for a missing or malformed XTRAIN_NCCL_ID, std::runtime_error when the
  // peers are not all there within init_timeout_s.
  virtual std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend,
                                                               double init_timeout_s) const = 0;
  // True for interpret mode's plugin (cuda/interp/): the backend's code executed on the CPU, its
  // device memory host memory, its NCCL one of processes on one machine (ranks reduce with Gloo
  // unless the spec names NCCL).
  virtual bool interpreted() const = 0;
  // Interpret mode's ranks: `host` (Gloo's communicator) running its collectives in the order of
  // `backend`'s stream, as NCCL's run on a GPU. The GPU plugin throws std::logic_error.
  virtual std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator> host,
                                                        Backend& backend) const = 0;

 protected:
  ~CudaPlugin() = default;  // a static object of the plugin's: never deleted through this type
};

struct CudaPluginEntry {
  std::uint32_t abi_version;
  const char* interface_digest;
  const CudaPlugin* plugin;
};

extern "C" {
using CudaPluginEntryFn = CudaPluginEntry (*)();
}

}  // namespace xtrain
