// Host waits: the polling loop that bounds every wait a lost peer could hang (cuda/host_wait.hpp,
// with stand-in queries: work that completes, fails, peers that fail, work that stalls past the
// deadline); the backend's waits going through the wait a communicator installs; a download
// view's bits where the host reads them; pinned memory and the count of host waits in interpret
// mode's runtime (cuda/interp/host_waits.hpp); and the count of one training step's waits through
// the real xlaunch and xtrain-worker, which a sync added anywhere in a step makes fail.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/host_wait.hpp"
#include "cuda/interp/host_waits.hpp"
#include "worker/math/bf16.hpp"
#include "tests/cuda/training_job.hpp"
#include "worker/comm/communicator.hpp"

using namespace std::chrono_literals;
using xtrain::CommunicatorError;
using xtrain::cuda::HostWaitProbes;
using xtrain::cuda::poll_until_done;
using xtrain::interp::host_waits;

TEST_CASE("a host wait returns once the work is done, asking the peers at every poll until then", "[interp][host_wait]") {
  int work_polls = 0, peer_polls = 0;
  const HostWaitProbes probes{[&] { return ++work_polls == 4; }, [&] { ++peer_polls; }};
  CHECK(poll_until_done(probes, 10s, 1us));
  CHECK(work_polls == 4);
  CHECK(peer_polls == 3);  // not after the work is seen done
  // Done at the first poll is done, even with no time left; no peer check is needed.
  CHECK(poll_until_done({[] { return true; }, {}}, 0s));
}

TEST_CASE("a host wait ends with the error of the work or of the peers, whichever comes first", "[interp][host_wait]") {
  int polls = 0;
  const auto work_fails = [&] {
    if (++polls == 3) throw std::runtime_error("CUDA error: cudaErrorLaunchFailure");
    return false;
  };
  CHECK_THROWS_WITH(poll_until_done({work_fails, [] {}}, 10s, 1us), "CUDA error: cudaErrorLaunchFailure");
  CHECK(polls == 3);
  polls = 0;
  const auto peer_lost = [&] {
    if (++polls == 2) throw CommunicatorError("NCCL: ncclRemoteError");
  };
  CHECK_THROWS_AS(poll_until_done({[] { return false; }, peer_lost}, 10s, 1us), CommunicatorError);
  CHECK(polls == 2);
}

TEST_CASE("a host wait on work that stalls gives up at the deadline, not before and not long after",
          "[interp][host_wait]") {
  const auto t0 = std::chrono::steady_clock::now();
  int peer_polls = 0;
  CHECK_FALSE(poll_until_done({[] { return false; }, [&] { ++peer_polls; }}, 50ms));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 50ms);
  CHECK(waited < 2s);  // a loaded machine's scheduling, not the loop, may add to the 20 us pauses
  CHECK(peer_polls > 1);  // the peers are watched throughout, not only at the end
  CHECK(xtrain::cuda::timeout_of(0.25) == std::chrono::milliseconds(250));
  CHECK(xtrain::cuda::timeout_of(1e300) == std::chrono::steady_clock::duration::max());
}

namespace {

std::unique_ptr<xtrain::Backend> interpreted_backend() { return xtrain::cuda::make_backend(0, xtrain::Precision::fp32); }

xtrain::cuda::CudaBackend& cuda_of(xtrain::Backend& b) { return dynamic_cast<xtrain::cuda::CudaBackend&>(b); }

}  // namespace

TEST_CASE("the backend's host waits (downloads, sum_squares, synchronize) go through the installed wait, and only they",
          "[interp][host_wait]") {
  auto owned = interpreted_backend();
  xtrain::cuda::CudaBackend& gpu = cuda_of(*owned);
  float* x = gpu.alloc_floats(8);  // (8,)
  const std::vector<float> ones(8, 1.0f);
  gpu.upload(x, ones.data(), ones.size());
  std::vector<std::string> waits;
  bool peer_lost = false;
  gpu.set_stream_wait([&](cudaStream_t stream, const char* what) {
    CHECK(stream == gpu.stream());
    waits.emplace_back(what);
    if (peer_lost) throw CommunicatorError("peer lost");
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);  // a wait must wait: the work runs now
  });
  std::vector<float> back(8);
  gpu.download(back.data(), x, back.size());
  CHECK(back == ones);
  CHECK(gpu.sum_squares(x, 8) == 8.0);
  float* left = gpu.alloc_floats(2);  // (2) the double's bytes
  const long before_into = host_waits().total();
  gpu.sum_squares_into(left, x, 8);  // stays on the device: no wait, installed or not
  CHECK(host_waits().total() == before_into);
  gpu.free(left);
  gpu.synchronize();
  CHECK(waits == std::vector<std::string>{"a download", "sum_squares", "synchronize"});
  peer_lost = true;  // a wait that fails fails the operation, with the communicator's error
  CHECK_THROWS_AS(gpu.download(back.data(), x, back.size()), CommunicatorError);
  CHECK_THROWS_AS(gpu.sum_squares(x, 8), CommunicatorError);
  gpu.set_stream_wait({});
  const long before = host_waits().stream_synchronize;
  gpu.synchronize();  // none installed: cudaStreamSynchronize
  CHECK(host_waits().stream_synchronize == before + 1);
  gpu.free(x);
}

TEST_CASE("the backend stages small transfers through pinned memory: uploads wait for nothing, a download once",
          "[interp][host_wait]") {
  auto owned = interpreted_backend();
  xtrain::cuda::CudaBackend& gpu = cuda_of(*owned);
  const size_t n = 4096;
  int32_t* tokens = gpu.alloc_ints(n);  // (n,)
  xtrain::ActPtr acts = gpu.alloc_acts(n);  // (n,)
  std::vector<int32_t> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(i * 7);
  std::vector<float> values(n, 0.5f);
  const xtrain::interp::HostWaits before = host_waits();
  for (int round = 0; round < 3; ++round) {
    gpu.upload(tokens, host.data(), n);
    gpu.upload(acts, values.data(), n);
  }
  CHECK(host_waits().total() == before.total());  // no upload waited
  std::vector<int32_t> back(n);
  gpu.download(back.data(), tokens, n);
  CHECK(back == host);
  CHECK(host_waits().total() == before.total() + 1);  // the download's one wait, no pageable copy
  CHECK(host_waits().pageable_copy == before.pageable_copy);
  // No upload had run when the next came (interpret mode's device runs behind the host), so each
  // took its own buffer, and the download a seventh. Its wait ran them all: more reuse those.
  CHECK(gpu.pinned_buffers() == 7);
  for (int round = 0; round < 3; ++round) gpu.upload(tokens, host.data(), n);
  CHECK(gpu.pinned_buffers() == 7);
  gpu.free(tokens);
  gpu.free(acts.data());
}

TEST_CASE("transfers past the pinned ring's size go straight from and to the caller's memory, bf16 converted",
          "[interp][host_wait]") {
  auto owned = xtrain::cuda::make_backend(0, xtrain::Precision::bf16);
  xtrain::cuda::CudaBackend& gpu = cuda_of(*owned);
  const size_t n = xtrain::cuda::PinnedStaging::kMaxBytes / 2 + 3;  // past the limit as floats and as bf16
  float* params = gpu.alloc_floats(n);      // (n,)
  xtrain::ActPtr weights = gpu.alloc_acts(n);  // (n,) bf16
  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 251) * 0.5f;  // exact in bf16
  const xtrain::interp::HostWaits before = host_waits();
  gpu.upload(params, host.data(), n);
  gpu.upload(weights, host.data(), n);
  std::vector<float> back(n, -1.0f);
  gpu.download(back.data(), params, n);
  CHECK(back == host);
  std::vector<float> converted(n, -1.0f);
  gpu.download(converted.data(), weights, n);
  CHECK(converted == host);
  // Pageable, as a GPU's host sees them: the loads and checkpoints, never a step's transfers.
  CHECK(host_waits().pageable_copy == before.pageable_copy + 4);
  gpu.free(params);
  gpu.free(weights.data());
}

TEST_CASE("a download view is the activations' stored bits where the host reads them, after one wait",
          "[interp][host_wait]") {
  auto owned = xtrain::cuda::make_backend(0, xtrain::Precision::bf16);
  xtrain::cuda::CudaBackend& gpu = cuda_of(*owned);
  const size_t past_ring = xtrain::cuda::PinnedStaging::kMaxBytes / 2 + 3;  // bf16 past the ring's size
  for (const size_t n : {size_t{5000}, past_ring, size_t{40}}) {
    INFO(n << " activations");
    xtrain::ActPtr acts = gpu.alloc_acts(n);  // (n,) bf16
    std::vector<float> host(n);
    for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 251) * 0.5f - 60.0f;  // exact in bf16
    gpu.upload(acts, host.data(), n);
    const xtrain::interp::HostWaits before = host_waits();
    const auto* bits = static_cast<const std::uint16_t*>(gpu.download_view(acts, n));
    // Small: a buffer of the pinned ring, so no pageable copy; large: the backend's own memory.
    const bool pinned = n != past_ring;
    CHECK(host_waits().total() == before.total() + (pinned ? 1 : 2));  // the wait, and the pageable copy
    cudaPointerAttributes a{};
    REQUIRE(cudaPointerGetAttributes(&a, bits) == cudaSuccess);
    CHECK((a.type == cudaMemoryTypeHost) == pinned);
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += bits[i] != xtrain::math::bf16_bits_from_float(host[i]) ? 1 : 0;
    CHECK(wrong == 0);
    gpu.free(acts.data());
  }
}

TEST_CASE("with copies still in flight the pinned ring grows instead of reusing a buffer, and drains at its limit",
          "[interp][host_wait]") {
  auto owned = interpreted_backend();
  xtrain::cuda::CudaBackend& gpu = cuda_of(*owned);
  const size_t n = 1024;
  int32_t* tokens = gpu.alloc_ints(n);   // (n,)
  int32_t* targets = gpu.alloc_ints(n);  // (n,)
  std::vector<int32_t> a(n, 3), b(n, 5);
  // Interpret mode's device runs behind the host: no copy completes until the host waits.
  const xtrain::interp::HostWaits before = host_waits();
  for (int micro = 0; micro < 3; ++micro) {
    gpu.upload(tokens, a.data(), n);
    gpu.upload(targets, b.data(), n);
  }
  CHECK(gpu.pinned_buffers() == 6);  // one per copy in flight: none overwritten
  CHECK(host_waits().total() == before.total());
  std::vector<int32_t> back(n);
  gpu.download(back.data(), targets, n);  // its wait completes every copy
  CHECK(back == b);
  CHECK(gpu.pinned_buffers() == 7);
  for (int micro = 0; micro < 3; ++micro) gpu.upload(tokens, a.data(), n);
  CHECK(gpu.pinned_buffers() == 7);  // done buffers are reused
  // Past the limit the ring waits for the stream (once) rather than grow.
  const long waited = host_waits().stream_synchronize;
  for (size_t i = 0; i < xtrain::cuda::PinnedStaging::kMaxBuffers + 4; ++i) gpu.upload(tokens, a.data(), n);
  CHECK(gpu.pinned_buffers() == xtrain::cuda::PinnedStaging::kMaxBuffers);
  CHECK(host_waits().stream_synchronize == waited + 1);
  gpu.download(back.data(), tokens, n);
  CHECK(back == a);
  gpu.free(tokens);
  gpu.free(targets);
}

TEST_CASE("interpret mode's pinned memory is host memory the runtime knows, and its copies never wait",
          "[interp][runtime]") {
  void* pinned = nullptr;
  REQUIRE(cudaHostAlloc(&pinned, 256, cudaHostAllocDefault) == cudaSuccess);
  cudaPointerAttributes a{};
  REQUIRE(cudaPointerGetAttributes(&a, static_cast<char*>(pinned) + 100) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeHost);
  std::vector<char> pageable(256);
  REQUIRE(cudaPointerGetAttributes(&a, pageable.data()) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeUnregistered);
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, 256) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t event = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);

  const xtrain::interp::HostWaits w0 = host_waits();
  REQUIRE(cudaMemcpyAsync(device, pinned, 256, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(pinned, device, 256, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(device, device, 128, cudaMemcpyDeviceToDevice, stream) == cudaSuccess);
  REQUIRE(cudaEventRecord(event, stream) == cudaSuccess);
  CHECK(cudaEventQuery(event) == cudaErrorNotReady);  // the copies run when the host waits
  CHECK(host_waits().total() == w0.total());
  // A copy running past the pinned allocation's end is pageable at its tail: counted.
  REQUIRE(cudaMemcpyAsync(device, static_cast<char*>(pinned) + 128, 256, cudaMemcpyHostToDevice, stream) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(pageable.data(), device, 256, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
  CHECK(host_waits().pageable_copy == w0.pageable_copy + 2);
  REQUIRE(cudaEventSynchronize(event) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaStreamQuery(stream) == cudaSuccess);
  REQUIRE(cudaMemcpy(pageable.data(), device, 16, cudaMemcpyDeviceToHost) == cudaSuccess);
  const xtrain::interp::HostWaits w1 = host_waits();
  CHECK(w1.event_synchronize == w0.event_synchronize + 1);
  CHECK(w1.stream_synchronize == w0.stream_synchronize + 1);
  CHECK(w1.stream_query_done == w0.stream_query_done + 1);
  CHECK(w1.blocking_copy == w0.blocking_copy + 1);
  CHECK(w1.total() == w0.total() + 6);

  CHECK(cudaFreeHost(pageable.data()) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  REQUIRE(cudaPointerGetAttributes(&a, pinned) == cudaSuccess);
  CHECK(a.type == cudaMemoryTypeUnregistered);
  cudaEventDestroy(event);
  cudaStreamDestroy(stream);
  cudaFree(device);
}

namespace {

// Every rank's host waits of a run: the files the ranks' runtimes wrote at exit.
std::vector<nlohmann::json> ranks_waits(const std::filesystem::path& dir) {
  std::vector<nlohmann::json> out;
  for (const auto& f : std::filesystem::directory_iterator(dir)) out.push_back(nlohmann::json::parse(std::ifstream(f.path())));
  return out;
}

long total(const nlohmann::json& w) {
  long sum = 0;
  for (const auto& [kind, count] : w.items()) sum += count.get<long>();
  return sum;
}

}  // namespace

// The waits of the steps a longer run adds are the waits of that many steady steps: startup, the
// first step's recording, the final checkpoint and the exit are the same in both runs. Expected,
// on any number of ranks: the loss's download (which ends the rank's busy time), then one download
// of the step's all-reduced scalars with the gradient norm's sum of squares beside them: 2 (Gloo's
// collectives run on the stream, as NCCL's would: no wait of their own). One more wait anywhere in
// a step fails it.
TEST_CASE("a training step waits for the device only where it must: twice, on one rank and on two",
          "[interp_training][host_waits]") {
  auto job = xtrain::test::TrainingJob::small_interpreted("host-waits", 1, 1);  // steps: each run's own
  const std::filesystem::path root = std::filesystem::temp_directory_path() / ("xtrain-host-waits-" + std::to_string(::getpid()));
  const auto waits_of = [&](const std::string& run, int nproc, int steps) {
    const std::filesystem::path dir = root / run;
    std::filesystem::create_directories(dir);
    ::setenv("XTRAIN_INTERP_HOST_WAITS", (dir / "rank-%p.json").c_str(), 1);
    job.launch(run, nproc, [&](nlohmann::json& s) { s["train"]["steps"] = steps; });
    ::unsetenv("XTRAIN_INTERP_HOST_WAITS");
    const std::vector<nlohmann::json> ranks = ranks_waits(dir);
    REQUIRE(ranks.size() == static_cast<size_t>(nproc));
    return ranks;
  };
  constexpr int kShort = 3, kLong = 7;
  for (const auto& [nproc, per_step] : {std::pair{1, 2L}, std::pair{2, 2L}}) {
    const auto shorter = waits_of("short-" + std::to_string(nproc), nproc, kShort);
    const auto longer = waits_of("long-" + std::to_string(nproc), nproc, kLong);
    // Ranks differ in what they do once (rank 0 writes the checkpoint), not per step: the ranks'
    // totals in order pair each rank's two runs.
    std::vector<long> added;
    std::vector<long> s_totals, l_totals;
    for (const auto& w : shorter) s_totals.push_back(total(w));
    for (const auto& w : longer) l_totals.push_back(total(w));
    std::sort(s_totals.begin(), s_totals.end());
    std::sort(l_totals.begin(), l_totals.end());
    for (size_t r = 0; r < s_totals.size(); ++r) added.push_back(l_totals[r] - s_totals[r]);
    INFO(nproc << " rank(s): " << kShort << " steps " << shorter[0].dump() << ", " << kLong << " steps "
               << longer[0].dump());
    CHECK(added == std::vector<long>(static_cast<size_t>(nproc), per_step * (kLong - kShort)));
    // Nothing staged through pageable memory, nothing synchronous, no event or device waits.
    for (const char* kind : {"pageable_copy", "blocking_copy", "event_synchronize", "device_synchronize"}) {
      long in_short = 0, in_long = 0;
      for (const auto& w : shorter) in_short += w.at(kind).get<long>();
      for (const auto& w : longer) in_long += w.at(kind).get<long>();
      CHECK(in_long == in_short);
    }
  }
  std::filesystem::remove_all(root);
}
