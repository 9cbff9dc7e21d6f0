// The CUDA backend's entry points for the worker. Plain C++: no CUDA headers, so worker/main.cpp
// and the tests include it without nvcc.
#pragma once

#include <memory>
#include <string>

#include "common/job_spec.hpp"  // Precision

namespace xtrain {
class Backend;
class Communicator;
struct WorkerEnv;
}  // namespace xtrain

namespace xtrain::cuda {

// GPUs this process can use; 0 when there is no GPU or no driver (cudaGetDeviceCount's
// cudaErrorInsufficientDriver and cudaErrorNoDevice). Any other CUDA failure throws
// std::runtime_error naming it (a broken driver is not "no GPU").
int visible_device_count();

// One line for the log, e.g. "GPU 0: NVIDIA H200, sm_90, 132 SMs, 140 GiB".
std::string describe_device(int device);

// The backend on GPU `device` (a worker uses its LOCAL_RANK) in `precision`: bf16 (mixed
// precision, the default for training), tf32 (TF32 tensor cores for fp32 products) or fp32
// (strict). Throws std::invalid_argument when `device` is not visible, and SpecError naming
// train.precision for bf16 on a GPU before compute capability 8.0.
std::unique_ptr<Backend> make_backend(int device, Precision precision);

// The NCCL communicator of this rank, on `backend`'s device and ordered after its stream.
// Throws std::invalid_argument before any NCCL call when XTRAIN_NCCL_ID is missing (world > 1)
// or malformed, or when `backend` is not the CUDA backend; std::runtime_error, naming the rank
// and the timeout, when the peers are not all there within init_timeout_s (the communicator is
// aborted first: no hang).
std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv& env, Backend& backend, double init_timeout_s);

}  // namespace xtrain::cuda
