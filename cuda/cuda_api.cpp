#include "cuda/cuda_api.hpp"

#include <cuda_runtime_api.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "cuda/check.hpp"
#include "cuda/cuda_backend.hpp"

namespace xtrain::cuda {
namespace {

// CUDA's version codes: 12080 is 12.8.
std::string cuda_version(int code) { return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 10); }

// A machine without the driver reports driver version 0.
std::string driver_and_runtime() {
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return (driver > 0 ? "driver CUDA " + cuda_version(driver) : std::string("no NVIDIA driver")) +
         ", runtime CUDA " + cuda_version(runtime);
}

}  // namespace

CudaDeviceCount count_devices() {
  CudaDeviceCount result;
  const cudaError_t err = cudaGetDeviceCount(&result.count);  // left untouched on failure
  if (err == cudaSuccess) return result;
  cudaGetLastError();
  result.count = 0;
  if (err == cudaErrorNoDevice) return result;
  result.error = std::string("cudaGetDeviceCount: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                 "); " + driver_and_runtime();
  return result;
}

int visible_device_count() {
  const CudaDeviceCount devices = count_devices();
  if (!devices.error.empty()) throw std::runtime_error(devices.error);
  return devices.count;
}

namespace {

void require_visible(int device) {
  const int count = visible_device_count();
  if (device < 0 || device >= count) {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    throw std::invalid_argument("GPU " + std::to_string(device) + " was asked for (LOCAL_RANK), but " +
                                std::to_string(count) + " GPU(s) are visible" +
                                (visible != nullptr ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : ""));
  }
}

}  // namespace

CudaDeviceInfo device_info(int device) {
  require_visible(device);
  cudaDeviceProp p{};
  XTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  CudaDeviceInfo info{p.name, p.major, p.minor, p.multiProcessorCount, 0, p.totalGlobalMem};
  // cudaMemGetInfo reports on the current device. Not switched back: since CUDA 12, selecting a
  // device creates its context, and a context on a GPU the rank does not use costs memory there.
  XTRAIN_CUDA_CHECK(cudaSetDevice(device));
  XTRAIN_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

std::string describe_device(int device) { return device_info(device).describe(device); }

std::string versions() { return driver_and_runtime(); }

std::unique_ptr<Backend> make_backend(int device, Precision precision, bool deterministic) {
  require_visible(device);
  return std::make_unique<CudaBackend>(device, precision, deterministic);
}

}  // namespace xtrain::cuda
