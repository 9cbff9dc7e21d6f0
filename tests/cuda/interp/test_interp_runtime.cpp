// Interpret mode's runtime: stream capture records and replays, refuses what a real capture
// refuses (with CUDA's codes, invalidating the capture), and the warp collectives follow CUDA's
// documented semantics (Programming Guide, "Warp Shuffle Functions", "Warp Vote Functions").
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <vector>

#include "cuda/kernels/portable.cuh"

namespace {

using xtrain::cuda::launch_kernel;

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

// out[lane] for each kind of shuffle and vote, one warp; width 8 for the subsection rules.
__global__ void collectives(int* out) {
  const int lane = static_cast<int>(threadIdx.x);
  out[0 * 32 + lane] = __shfl_sync(0xFFFFFFFFu, lane * 10, 7);
  out[1 * 32 + lane] = __shfl_xor_sync(0xFFFFFFFFu, lane, 5);
  out[2 * 32 + lane] = __shfl_down_sync(0xFFFFFFFFu, lane, 3, 8);
  out[3 * 32 + lane] = __shfl_up_sync(0xFFFFFFFFu, lane, 2, 8);
  out[4 * 32 + lane] = __shfl_sync(0xFFFFFFFFu, lane, 9, 8);
  out[5 * 32 + lane] = static_cast<int>(__ballot_sync(0xFFFFFFFFu, lane % 3 == 0));
  out[6 * 32 + lane] = __all_sync(0xFFFFFFFFu, lane < 32) + 2 * __any_sync(0xFFFFFFFFu, lane == 31);
  out[7 * 32 + lane] = __all_sync(0xFFFFFFFFu, lane < 31);
}

struct Buffer {
  float* p = nullptr;
  explicit Buffer(int n) {
    REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, n * sizeof(float)) == cudaSuccess);
  }
  ~Buffer() { cudaFree(p); }
  std::vector<float> read(int n) const {
    std::vector<float> h(static_cast<size_t>(n));
    REQUIRE(cudaMemcpy(h.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

}  // namespace

TEST_CASE("interpret mode records a captured stream's work and runs it at every replay", "[interp][runtime]") {
  Buffer x(100);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  launch_kernel(add_one, 4, 32, 0, s, x.p, 100);
  CHECK(x.p[0] == 0.0f);  // recorded, not run (interpret mode's device memory is host memory)
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const auto h = x.read(100);
  CHECK(h[0] == 2.0f);
  CHECK(h[99] == 2.0f);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
}

TEST_CASE("interpret mode refuses allocation, synchronous copies and synchronisation during capture",
          "[interp][runtime]") {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  Buffer x(4);
  float host[4] = {};
  auto refused_during_capture = [&](auto call) {
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    CHECK(call() == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();
  };
  refused_during_capture([&] {
    void* p = nullptr;
    return cudaMalloc(&p, 16);
  });
  refused_during_capture([&] { return cudaMemcpy(host, x.p, sizeof host, cudaMemcpyDeviceToHost); });
  refused_during_capture([&] { return cudaStreamSynchronize(s); });
  refused_during_capture([&] { return cudaDeviceSynchronize(); });
  // After an invalidated capture the stream works again.
  REQUIRE(cudaMemcpyAsync(host, x.p, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  cudaStreamDestroy(s);
}

TEST_CASE("interpret mode refuses copies that name memory the wrong way", "[interp][runtime]") {
  Buffer x(4);
  float host[4] = {};
  CHECK(cudaMemcpy(x.p, host, 8 * sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host, host + 1, sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host, x.p, sizeof(float), cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host, x.p, 4 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // the refusals' error, cleared for the next case
}

TEST_CASE("interpret mode's shuffles and votes follow CUDA's rules, widths included", "[interp][runtime]") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 8 * 32 * sizeof(int)) == cudaSuccess);
  launch_kernel(collectives, 1, 32, 0, nullptr, out);
  std::vector<int> h(8 * 32);
  REQUIRE(cudaMemcpy(h.data(), out, h.size() * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int lane = 0; lane < 32; ++lane) {
    INFO("lane " << lane);
    CHECK(h[0 * 32 + lane] == 70);
    CHECK(h[1 * 32 + lane] == (lane ^ 5));
    CHECK(h[2 * 32 + lane] == (lane % 8 + 3 < 8 ? lane + 3 : lane));  // no wrap past the subsection
    CHECK(h[3 * 32 + lane] == (lane % 8 >= 2 ? lane - 2 : lane));
    CHECK(h[4 * 32 + lane] == lane / 8 * 8 + 1);  // source 9 modulo the width 8
    CHECK(static_cast<unsigned>(h[5 * 32 + lane]) == ballot);
    CHECK(h[6 * 32 + lane] == 3);
    CHECK(h[7 * 32 + lane] == 0);
  }
  cudaFree(out);
}
