// The GPU build's answer to cuda/cuda_api.hpp's order_on_stream, which only interpret mode serves
// (cuda/interp/stream_ordered_communicator.cpp): Gloo reduces host memory, and a GPU's is not.
#include <memory>
#include <stdexcept>

#include "cuda/cuda_api.hpp"
#include "worker/comm/communicator.hpp"

namespace xtrain::cuda {

std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator>, Backend&) {
  throw std::logic_error("a host communicator cannot reduce a GPU's memory: GPU ranks reduce with NCCL");
}

}  // namespace xtrain::cuda
