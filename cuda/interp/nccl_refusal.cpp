// Interpret mode has no NCCL (its collectives need GPUs): ranks reduce with Gloo, which reads the
// emulated device memory directly, as it is host memory, in the stream's order
// (stream_ordered_communicator.cpp). The worker chooses Gloo for an interpreted plugin; this
// entry point only answers a caller that asks anyway.
#include <memory>
#include <stdexcept>

#include "cuda/cuda_api.hpp"

namespace xtrain::cuda {

std::unique_ptr<Communicator> make_nccl_communicator(const WorkerEnv&, Backend&, double) {
  throw std::invalid_argument("backend: \"nccl\" is not available in CUDA interpret mode (XTRAIN_CUDA_INTERPRET): "
                              "its ranks reduce with \"gloo\"");
}

}  // namespace xtrain::cuda
