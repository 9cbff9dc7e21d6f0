// Interpret mode's ranks reduce with a host communicator (Gloo) run in the stream's order
// (cuda/interp/stream_ordered_communicator.cpp), as NCCL's collectives run on a GPU. A stand-in
// host communicator records what each collective saw, so the order is checked on one process;
// then two ranks through the real xlaunch, one of them killed, for how a lost peer is reported.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_backend.hpp"
#include "tests/cuda/training_job.hpp"
#include "worker/comm/communicator.hpp"

namespace {

using xtrain::CommunicatorError;
using xtrain::GradBucket;

// Halves what it reduces (the average with a peer holding zeros), and records what it saw.
class RecordingCommunicator final : public xtrain::Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  std::string name() const override { return "recording"; }
  void start_all_reduce_average(GradBucket) override { starts++; }
  void finish_all_reduces() override {}
  void all_reduce_average(float* data, size_t count) override {
    if (fail) throw CommunicatorError("rank 0: rank 1 stopped answering");
    seen.emplace_back(data, data + count);
    for (size_t i = 0; i < count; ++i) data[i] *= 0.5f;
  }
  void broadcast(float* data, size_t count, int) override { seen.emplace_back(data, data + count); }
  void barrier() override { ++barriers; }

  std::vector<std::vector<float>> seen;
  int starts = 0, barriers = 0;
  bool fail = false;
};

}  // namespace

TEST_CASE("interpret mode's collectives run in the stream's order, and a lost peer fails the next wait as one",
          "[interp][host_wait]") {
  auto owned = xtrain::cuda::make_backend(0, xtrain::Precision::fp32);
  auto& gpu = dynamic_cast<xtrain::cuda::CudaBackend&>(*owned);
  auto host = std::make_unique<RecordingCommunicator>();
  RecordingCommunicator& seen_by = *host;
  auto comm = xtrain::cuda::order_on_stream(std::move(host), gpu);
  CHECK(comm->name() == "recording");
  CHECK(comm->world_size() == 2);
  std::vector<int> observed;
  comm->set_bucket_observer([&](int id) { observed.push_back(id); });

  const size_t n = 8;
  float* grads = gpu.alloc_floats(n);  // (n,)
  const std::vector<float> ones(n, 1.0f), threes(n, 3.0f);
  gpu.upload(grads, ones.data(), n);  // the work that writes the bucket, still queued
  comm->start_all_reduce_average(GradBucket{grads, n, 3});
  comm->finish_all_reduces();
  CHECK(seen_by.seen.empty());  // the stream has not run yet, nor has the collective
  std::vector<float> back(n);
  gpu.download(back.data(), grads, n);
  REQUIRE(seen_by.seen.size() == 1);
  CHECK(seen_by.seen[0] == ones);  // after the upload that wrote it
  CHECK(back == std::vector<float>(n, 0.5f));  // and before the download issued after it
  CHECK(observed == std::vector<int>{3, -1});
  CHECK(seen_by.starts == 0);  // the host communicator's queue of buckets is not used: the stream orders them

  gpu.upload(grads, threes.data(), n);
  comm->broadcast(grads, n, 0);  // blocking: done, after the upload, when it returns
  REQUIRE(seen_by.seen.size() == 2);
  CHECK(seen_by.seen[1] == threes);
  comm->barrier();
  CHECK(seen_by.barriers == 1);

  seen_by.fail = true;
  comm->start_all_reduce_average(GradBucket{grads, n, 0});
  CHECK_THROWS_AS(gpu.download(back.data(), grads, n), CommunicatorError);
  CHECK_THROWS_WITH(gpu.synchronize(), Catch::Matchers::Contains("rank 1 stopped answering"));
  // The stream's fault outlives the backend: reset the device so that later cases start clean.
  comm.reset();
  owned.reset();
  cudaDeviceReset();
  cudaGetLastError();
}

TEST_CASE("an interpreted rank's lost peer is reported as on CPU ranks: the rank that died is the cause",
          "[interp_training]") {
  auto job = xtrain::test::TrainingJob::small_interpreted("lost-peer", 1, 20);
  // Rank 1 closes its connections at step 5 and exits 3 a second later, while rank 0's stream
  // runs a gradient all-reduce that waits for it.
  const auto o = job.run_xlaunch("run", 2, [](nlohmann::json&) {}, "XTRAIN_FAULT_EXIT=1:5:3:1");
  job.check_rank_one_lost("run", o);
}
