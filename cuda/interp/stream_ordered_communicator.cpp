// Interpret mode's collectives: Gloo's, over the emulated device memory (host memory, which Gloo
// reduces), run in the order of the backend's stream, as NCCL's run on a GPU. Gloo reading a
// bucket when the trainer hands it over would read gradients that the stream has not written yet
// (interpret mode runs stream work when the host waits, as a GPU runs it behind the host), and
// the stream's later work would race with Gloo's writes. So each collective is work on the
// stream: it runs after the work that wrote its data and before any work issued after it (the
// optimizer's), on the thread that waits for the stream. A failure there (a lost peer) is the
// stream's fault, and the backend's next wait throws it again as the CommunicatorError it was,
// so the worker reports peer_lost as it does for CPU ranks.
#include <cuda_runtime_api.h>

#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "cuda/check.hpp"
#include "cuda/cuda_api.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/interp/stream_work.hpp"
#include "worker/comm/communicator.hpp"

namespace xtrain::cuda {
namespace {

class StreamOrderedCommunicator final : public Communicator {
 public:
  StreamOrderedCommunicator(std::unique_ptr<Communicator> host, CudaBackend& backend)
      : host_(std::move(host)), backend_(backend) {
    backend_.set_stream_wait([this](cudaStream_t stream, const char*) {
      const cudaError_t synced = cudaStreamSynchronize(stream);
      if (failure_) std::rethrow_exception(failure_);
      XTRAIN_CUDA_CHECK(synced);
    });
  }
  ~StreamOrderedCommunicator() override { backend_.set_stream_wait({}); }
  StreamOrderedCommunicator(const StreamOrderedCommunicator&) = delete;
  StreamOrderedCommunicator& operator=(const StreamOrderedCommunicator&) = delete;

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  std::string name() const override { return host_->name(); }

  void start_all_reduce_average(GradBucket bucket) override {
    if (bucket.count == 0) return;
    issue("an all-reduce (a bucket: gradients or the step's scalars)", [this, bucket] {
      if (bucket_observer_) bucket_observer_(bucket.id);
      host_->all_reduce_average(bucket.data, bucket.count);
      if (bucket_observer_) bucket_observer_(-1);
    });
  }
  // The stream runs whatever is issued next after the buckets: nothing to wait for here.
  void finish_all_reduces() override {}

  void all_reduce_average(float* data, size_t count) override {
    run_blocking("an all-reduce", [this, data, count] { host_->all_reduce_average(data, count); });
  }
  void broadcast(float* data, size_t count, int root) override {
    run_blocking("a broadcast", [this, data, count, root] { host_->broadcast(data, count, root); });
  }
  void barrier() override {
    run_blocking("a barrier", [this] { host_->barrier(); });
  }

 private:
  void issue(const char* what, std::function<void()> collective) {
    XTRAIN_CUDA_CHECK(interp::enqueue(backend_.stream(), what, [this, collective = std::move(collective)] {
      try {
        collective();
      } catch (...) {
        failure_ = std::current_exception();
        throw;
      }
    }));
  }
  void run_blocking(const char* what, std::function<void()> collective) {
    issue(what, std::move(collective));
    backend_.wait_for_stream(what);
  }

  std::unique_ptr<Communicator> host_;
  CudaBackend& backend_;
  std::exception_ptr failure_;  // the first collective that failed, thrown at every wait after
};

}  // namespace

std::unique_ptr<Communicator> order_on_stream(std::unique_ptr<Communicator> host, Backend& backend) {
  auto* cuda_backend = dynamic_cast<CudaBackend*>(&backend);
  if (cuda_backend == nullptr) {
    throw std::invalid_argument("collectives on the stream need the CUDA backend, not \"" + backend.name() + "\"");
  }
  return std::make_unique<StreamOrderedCommunicator>(std::move(host), *cuda_backend);
}

}  // namespace xtrain::cuda
