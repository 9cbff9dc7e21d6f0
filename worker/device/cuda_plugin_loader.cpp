#include "worker/device/cuda_plugin_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

#include "common/cuda_interpret.hpp"
#include "common/gpu/nccl_library.hpp"
#include "xtrain/plugin_interface.hpp"

namespace xtrain {

std::string cuda_plugin_path() {
  if (const char* path = std::getenv(kCudaPluginVariable); path != nullptr && *path != '\0') return path;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const char* file = cuda_interpret_requested() ? kCudaInterpretPluginFileName : kCudaPluginFileName;
  return (exe.parent_path().parent_path() / "lib" / file).string();
}

CudaPluginLoad load_cuda_plugin(const std::string& path) {
  CudaPluginLoad load;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    load.absent = true;
    load.failure = cuda_interpret_requested()
                       ? std::string(kCudaInterpretVariable) + "=1 asks for CUDA interpret mode, but " + path +
                             " is not there (a build without interpret mode, or not installed in ../lib)"
                       : "the CUDA plugin " + path + " is not there (this xtrain-worker was built without CUDA, or " +
                             kCudaPluginFileName + " was not installed in ../lib beside it; " + kCudaPluginVariable +
                             " names another)";
    return load;
  }
  // Interpret mode's NCCL is in its plugin: nothing to load first.
  NcclLibrary nccl;
  const bool interpret = cuda_interpret_requested();
  try {
    if (!interpret) nccl = load_nccl_library(NcclSearch::from_environment());
  } catch (const std::exception& e) {
    load.failure = "the CUDA plugin " + path + " needs NCCL: " + e.what();
    return load;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    load.failure = "the CUDA plugin " + path + " cannot be loaded: " + dlerror();
    if (nccl.handle != nullptr) dlclose(nccl.handle);
    return load;
  }
  auto refuse = [&](const std::string& why) {
    load.failure = "the CUDA plugin " + path + " " + why;
    dlclose(handle);
    if (nccl.handle != nullptr) dlclose(nccl.handle);
    return load;
  };
  const auto entry = reinterpret_cast<CudaPluginEntryFn>(dlsym(handle, kCudaPluginEntryPoint));
  if (entry == nullptr) return refuse(std::string("has no entry point: ") + dlerror());
  const CudaPluginEntry e = entry();
  if (e.abi_version != kCudaPluginAbiVersion) {
    return refuse("has ABI version " + std::to_string(e.abi_version) + ", this xtrain-worker expects " +
                  std::to_string(kCudaPluginAbiVersion) + ": use the plugin built with this worker");
  }
  if (e.interface_digest == nullptr || std::string(e.interface_digest) != kCudaPluginInterfaceDigest) {
    return refuse(std::string("was built from other interface headers (digest ") +
                  (e.interface_digest ? e.interface_digest : "none") + ", this xtrain-worker's " +
                  kCudaPluginInterfaceDigest + "): use the plugin built with this worker");
  }
  if (e.plugin == nullptr) return refuse("returned no plugin object");
  load.plugin = e.plugin;
  load.nccl = interpret ? std::string("interpret mode's NCCL, in the plugin") : nccl.describe();
  return load;
}

}  // namespace xtrain
