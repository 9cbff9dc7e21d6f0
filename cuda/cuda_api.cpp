#include "cuda/cuda_api.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/check.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/nccl_communicator.hpp"

namespace xtrain::cuda {

int visible_device_count() {
  int count = 0;  // cudaGetDeviceCount leaves it untouched on failure
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    cudaGetLastError();
    return 0;
  }
  XTRAIN_CUDA_CHECK(err);
  return count;
}

std::string describe_device(int device) {
  cudaDeviceProp p{};
  XTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  const double gib = static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
  return "GPU " + std::to_string(device) + ": " + p.name + ", sm_" + std::to_string(p.major) +
         std::to_string(p.minor) + ", " + std::to_string(p.multiProcessorCount) + " SMs, " +
         std::to_string(static_cast<int>(gib + 0.5)) + " GiB";
}

std::unique_ptr<Backend> make_backend(int device, Precision precision) {
  const int count = visible_device_count();
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    throw std::invalid_argument("GPU " + std::to_string(device) + " was asked for (LOCAL_RANK), but " +
                                std::to_string(count) + " GPU(s) are visible" +
                                (visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : ""));
  }
  if (precision == Precision::bf16) {
    cudaDeviceProp p{};
    XTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    if (p.major < 8) {
      throw SpecError("train.precision", "bf16 (the default on CUDA) needs compute capability 8.0 or newer, but this "
                                         "rank has " + describe_device(device) + "; set \"fp32\"");
    }
  }
  return std::make_unique<CudaBackend>(device, precision);
}

std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend, double init_timeout_s) {
  // A missing or malformed id is reported before anything else (a world of one without an id
  // gets a fresh one in the communicator: asking for it here would start a second bootstrap).
  if (!env.nccl_id_hex.empty() || env.where.world_size > 1) resolve_nccl_id(env);
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) {
    throw std::invalid_argument("the NCCL communicator needs the CUDA backend, not \"" + backend.name() +
                                "\" (use backend gloo for CPU ranks)");
  }
  return std::make_unique<NcclCommunicator>(env, *cuda_backend, init_timeout_s);
}

}  // namespace xtrain::cuda
