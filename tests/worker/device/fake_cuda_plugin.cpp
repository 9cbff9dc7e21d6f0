// Stand-ins for libxtrain-cuda.so, so the worker's choice of device is tested on machines without
// a GPU: XTRAIN_FAKE_CUDA (read at every call) says what this one pretends:
//   "abi" / "digest"   a plugin of another ABI version / built from other interface headers
//   "no-driver"        CUDA cannot count the GPUs (the driver is older than the runtime)
//   "no-gpu"           a driver without GPUs
//   "sm70"             one V100 (no bf16)
//   "busy"             two A100s of 40 GiB with 6 GiB free (GPT-2 124M at 16 x 1024 tokens does not fit)
//   anything else      two H200s
// make_backend throws, naming the GPU and precision it was given (and train.deterministic when
// false). Built without XTRAIN_FAKE_ENTRY_POINT, the library has no entry point at all.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "worker/model/backend.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/device/cuda_plugin.hpp"
#include "xtrain/plugin_interface.hpp"

#ifdef XTRAIN_FAKE_ENTRY_POINT
namespace {

using namespace xtrain;

std::string pretend() {
  const char* what = std::getenv("XTRAIN_FAKE_CUDA");
  return what ? what : "";
}

class FakePlugin final : public CudaPlugin {
 public:
  CudaDeviceCount device_count() const override {
    if (pretend() == "no-driver") {
      return {0, "cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA "
                 "runtime version); driver CUDA 12.2, runtime CUDA 13.0"};
    }
    if (pretend() == "no-gpu") return {0, ""};
    return {pretend() == "sm70" ? 1 : 2, ""};
  }
  CudaDeviceInfo device_info(int) const override {
    constexpr std::size_t kGiB = std::size_t(1) << 30;
    if (pretend() == "sm70") return {"Tesla V100-SXM2-16GB", 7, 0, 80, 15 * kGiB, 16 * kGiB};
    if (pretend() == "busy") return {"NVIDIA A100-SXM4-40GB", 8, 0, 108, 6 * kGiB, 40 * kGiB};
    return {"NVIDIA H200", 9, 0, 132, 139 * kGiB, 140 * kGiB};
  }
  std::string versions() const override { return "driver CUDA 12.8, runtime CUDA 13.0"; }
  std::unique_ptr<Backend> make_backend(int device, const std::string& precision, bool deterministic) const override {
    throw std::runtime_error("fake CUDA plugin: no backend (GPU " + std::to_string(device) + ", " + precision +
                             (deterministic ? "" : ", not deterministic") + ")");
  }
  std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv&, Backend&, double) const override {
    throw std::runtime_error("fake CUDA plugin: no communicator");
  }
  bool interpreted() const override { return false; }
  std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator>, Backend&) const override {
    throw std::runtime_error("fake CUDA plugin: no interpret mode");
  }
};

}  // namespace

extern "C" __attribute__((visibility("default"))) xtrain::CudaPluginEntry xtrain_cuda_plugin() {
  static const FakePlugin plugin;
  const std::string what = pretend();
  return {xtrain::kCudaPluginAbiVersion + (what == "abi" ? 1 : 0),
          what == "digest" ? "0000000000000000" : xtrain::kCudaPluginInterfaceDigest, &plugin};
}
#endif
