// The CUDA backend's entry points: the plugin (cuda/plugin.cpp) serves them to the worker, and the
// [gpu] tests and the GPU benchmark, which link the backend statically, call them directly. Plain
// C++: no CUDA headers, so the tests include it without nvcc.
#pragma once

#include <memory>
#include <string>

#include "common/precision.hpp"
#include "worker/device/cuda_plugin.hpp"  // CudaDeviceCount, CudaDeviceInfo

namespace xtrain {
class Backend;
class Communicator;
struct WorkerEnv;
}  // namespace xtrain

namespace xtrain::cuda {

// GPUs this process can use, or CUDA's error with the driver's and runtime's versions when it
// cannot count them (no driver, a driver older than the runtime: cudaErrorInsufficientDriver).
// cudaErrorNoDevice, a driver without GPUs, is a count of 0 and no error.
CudaDeviceCount count_devices();

// count_devices().count, or std::runtime_error with its error.
int visible_device_count();

// Name, compute capability, multiprocessors, free and total memory; leaves `device` the current
// one (its context made). Throws std::invalid_argument when `device` is not visible.
CudaDeviceInfo device_info(int device);

// One line for the log, e.g. "GPU 0: NVIDIA H200, sm_90, 132 SMs, 139.2 of 139.8 GiB free".
std::string describe_device(int device);

// "driver CUDA 12.8, runtime CUDA 13.0", or "no NVIDIA driver, runtime CUDA 13.0".
std::string versions();

// The backend on GPU `device` (a worker uses its LOCAL_RANK) in `precision`: bf16 (mixed
// precision, the default for training; compute capability 8.0 or newer, which the worker checks
// first: worker/device/device_choice.hpp), tf32 (TF32 tensor cores for fp32 products) or fp32 (strict).
// deterministic: train.deterministic (CudaBackend's constructor says what false changes).
// Throws std::invalid_argument when `device` is not visible.
std::unique_ptr<Backend> make_backend(int device, Precision precision, bool deterministic = true);

// The NCCL communicator of this rank, on `backend`'s device and ordered after its stream.
// Throws std::invalid_argument before any NCCL call when XTRAIN_NCCL_ID is missing (world > 1)
// or malformed, or when `backend` is not the CUDA backend; std::runtime_error, naming the rank
// and the timeout, when the peers are not all there within init_timeout_s (the communicator is
// aborted first: no hang).
std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend, double init_timeout_s);

// Interpret mode only: `host` (Gloo's communicator, which reduces host memory, and interpret
// mode's device memory is host memory) made to run its collectives in the order of `backend`'s
// stream, as NCCL's run on a GPU. The GPU build throws std::logic_error: Gloo cannot read a GPU's
// memory.
std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator> host, Backend& backend);

}  // namespace xtrain::cuda
