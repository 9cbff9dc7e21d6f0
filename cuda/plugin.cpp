// libxtrain-cuda.so's entry point: the CudaPlugin of worker/device/cuda_plugin.hpp, served by
// cuda/cuda_api.hpp. The only symbol the library exports (CMake hides the rest).
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda/cuda_api.hpp"
#include "worker/model/backend.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/device/cuda_plugin.hpp"
#include "xtrain/plugin_interface.hpp"

namespace xtrain::cuda {
namespace {

class Plugin final : public CudaPlugin {
 public:
  CudaDeviceCount device_count() const override { return count_devices(); }
  CudaDeviceInfo device_info(int device) const override { return cuda::device_info(device); }
  std::string versions() const override { return cuda::versions(); }

  std::unique_ptr<Backend> make_backend(int device, const std::string& precision, bool deterministic) const override {
    for (const Precision p : {Precision::bf16, Precision::tf32, Precision::fp32}) {
      if (precision == precision_name(p)) return cuda::make_backend(device, p, deterministic);
    }
    throw std::invalid_argument("train.precision: the CUDA backend computes in \"bf16\", \"tf32\" or \"fp32\", not \"" +
                                precision + "\"");
  }

  std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend,
                                                       double init_timeout_s) const override {
    return cuda::make_nccl_communicator(env, backend, init_timeout_s);
  }

  std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator> host, Backend& backend) const override {
    return cuda::order_on_stream(std::move(host), backend);
  }

#if defined(XTRAIN_CUDA_INTERPRET)
  bool interpreted() const override { return true; }
#else
  bool interpreted() const override { return false; }
#endif
};

}  // namespace
}  // namespace xtrain::cuda

extern "C" __attribute__((visibility("default"))) xtrain::CudaPluginEntry xtrain_cuda_plugin() {
  static const xtrain::cuda::Plugin plugin;
  return {xtrain::kCudaPluginAbiVersion, xtrain::kCudaPluginInterfaceDigest, &plugin};
}

static_assert(std::is_same_v<decltype(&xtrain_cuda_plugin), xtrain::CudaPluginEntryFn>,
              "the entry point's type is the ABI's");
