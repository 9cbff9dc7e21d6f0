// Finding and loading the CUDA plugin (worker/device/cuda_plugin.hpp), every way it can fail returned
// as data: the caller decides whether a failure is an error (device "cuda") or a reason to train
// on the CPU (device "auto").
#pragma once

#include <string>

#include "worker/device/cuda_plugin.hpp"

namespace xtrain {

inline constexpr char kCudaPluginVariable[] = "XTRAIN_CUDA_PLUGIN";

// $XTRAIN_CUDA_PLUGIN when set; else lib/libxtrain-cuda.so beside the bin/ directory that holds
// this executable (<exe dir>/../lib), where the build and the bundle put it.
std::string cuda_plugin_path();

struct CudaPluginLoad {
  const CudaPlugin* plugin = nullptr;  // null when it did not load
  bool absent = false;                 // no file at the path: a build without CUDA, or not installed
  std::string failure;                 // why it did not load, naming the file; empty when it did
  std::string nccl;                    // when it did: the NCCL its communicators use
};

// Loads libnccl by the rule of common/gpu/nccl_library.hpp (so the plugin uses the NCCL that xlaunch
// made the unique id with), then the plugin with RTLD_NOW (a missing library or symbol fails
// here, not in the middle of training), then checks its entry point, ABI version and interface
// digest. A plugin that is refused is unloaded again; one that is used never is.
CudaPluginLoad load_cuda_plugin(const std::string& path);

}  // namespace xtrain
