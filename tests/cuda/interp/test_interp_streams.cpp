// Interpret mode's streams run behind the host, as a GPU's do (cuda/interp/runtime_queue.cpp):
// work runs when the host waits for it, in the order across streams that is worst for a missing
// wait; the legacy stream's implicit order holds; the host's misuse of pinned memory while a copy
// is in flight shows; gated work (another process's part) holds its stream until its gate opens.
// Device memory is host memory here, so the tests look at it directly.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/interp/stream_work.hpp"
#include "cuda/kernels/portable.cuh"

namespace {

using Catch::Matchers::Contains;
using xtrain::cuda::launch_kernel;

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

__global__ void write_past_the_end(float* x, int n) { x[n + static_cast<int>(threadIdx.x)] = 1.0f; }

constexpr int kN = 64;

struct Floats {
  float* p = nullptr;
  Floats() {
    REQUIRE(cudaMalloc(&p, kN * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, kN * sizeof(float)) == cudaSuccess);
  }
  ~Floats() { cudaFree(p); }
};

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags) { REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { REQUIRE(cudaEventCreate(&e) == cudaSuccess); }
  ~Event() { cudaEventDestroy(e); }
};

struct Pinned {
  void* p = nullptr;
  explicit Pinned(size_t bytes) { REQUIRE(cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess); }
  ~Pinned() { cudaFreeHost(p); }
  float* floats() const { return static_cast<float*>(p); }
};

}  // namespace

TEST_CASE("interpret mode runs a stream's work when the host waits for it, as a GPU runs behind its host",
          "[interp][streams]") {
  Floats x;
  Stream s(cudaStreamNonBlocking);
  Event done;
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  REQUIRE(cudaEventRecord(done.e, s.s) == cudaSuccess);
  CHECK(x.p[0] == 0.0f);  // issued, not run
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);
  CHECK(cudaEventQuery(done.e) == cudaErrorNotReady);
  CHECK(x.p[0] == 0.0f);
  // Asked again with nothing issued since, a query finishes the work, so polling loops end.
  CHECK(cudaEventQuery(done.e) == cudaSuccess);
  CHECK(x.p[kN - 1] == 1.0f);
  CHECK(cudaStreamQuery(s.s) == cudaSuccess);

  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  std::vector<float> back(kN);
  // A copy into pageable memory returns once it is done: the stream's earlier work ran first.
  REQUIRE(cudaMemcpyAsync(back.data(), x.p, kN * sizeof(float), cudaMemcpyDeviceToHost, s.s) == cudaSuccess);
  CHECK(back == std::vector<float>(kN, 2.0f));

  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  REQUIRE(cudaEventRecord(done.e, s.s) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(done.e) == cudaSuccess);
  CHECK(x.p[0] == 3.0f);
}

TEST_CASE("with CUDA_LAUNCH_BLOCKING=1 interpret mode runs a kernel before its launch returns, as CUDA does",
          "[interp][streams]") {
  Floats x;
  Stream s(cudaStreamNonBlocking);
  ::setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  ::unsetenv("CUDA_LAUNCH_BLOCKING");
  CHECK(x.p[0] == 1.0f);
  CHECK(cudaStreamQuery(s.s) == cudaSuccess);
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  CHECK(x.p[0] == 1.0f);  // without it, behind the host again
  REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
  CHECK(x.p[0] == 2.0f);

  // A fault is the launch check's, not a later wait's.
  ::setenv("CUDA_LAUNCH_BLOCKING", "1", 1);
  CHECK_THROWS_WITH(launch_kernel(write_past_the_end, 1, 1, 0, s.s, x.p, kN),
                    Contains("cudaGetLastError()") && Contains("cudaErrorIllegalAddress") &&
                        Contains("0 bytes past the end of an allocation"));
  ::unsetenv("CUDA_LAUNCH_BLOCKING");
  cudaDeviceReset();  // so that the fault does not outlive the case; it freed x's memory
  x.p = nullptr;
}

TEST_CASE("interpret mode runs a stream that skips its wait for another's event before that stream's work",
          "[interp][streams]") {
  const bool waits = GENERATE(false, true);
  Floats x, y;
  Stream producer(cudaStreamNonBlocking), consumer(cudaStreamNonBlocking);
  Event written;
  launch_kernel(add_one, 2, 32, 0, producer.s, x.p, kN);
  REQUIRE(cudaEventRecord(written.e, producer.s) == cudaSuccess);
  if (waits) REQUIRE(cudaStreamWaitEvent(consumer.s, written.e, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(y.p, x.p, kN * sizeof(float), cudaMemcpyDeviceToDevice, consumer.s) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  INFO((waits ? "with the wait" : "without the wait"));
  CHECK(x.p[0] == 1.0f);
  // Without the wait the copy ran before the kernel (issued last, run first): the bug shows.
  CHECK(y.p[0] == (waits ? 1.0f : 0.0f));
}

TEST_CASE("interpret mode's wait for one stream runs that stream's work and what it waits for, nothing else",
          "[interp][streams]") {
  Floats x, y;
  Stream a(cudaStreamNonBlocking), b(cudaStreamNonBlocking);
  Event a_done;
  launch_kernel(add_one, 2, 32, 0, a.s, x.p, kN);
  launch_kernel(add_one, 2, 32, 0, b.s, y.p, kN);
  REQUIRE(cudaStreamSynchronize(b.s) == cudaSuccess);
  CHECK(y.p[0] == 1.0f);
  CHECK(x.p[0] == 0.0f);  // a host reading x now has waited for the wrong stream
  REQUIRE(cudaEventRecord(a_done.e, a.s) == cudaSuccess);
  launch_kernel(add_one, 2, 32, 0, a.s, x.p, kN);  // after the event: not needed for it
  REQUIRE(cudaStreamWaitEvent(b.s, a_done.e, 0) == cudaSuccess);
  launch_kernel(add_one, 2, 32, 0, b.s, y.p, kN);
  REQUIRE(cudaStreamSynchronize(b.s) == cudaSuccess);
  CHECK(x.p[0] == 1.0f);  // b waited for a's event: a's work before it ran
  CHECK(y.p[0] == 2.0f);
  REQUIRE(cudaStreamSynchronize(a.s) == cudaSuccess);
  CHECK(x.p[0] == 2.0f);
}

TEST_CASE("interpret mode orders the legacy stream after blocking streams' work, and non-blocking ones not at all",
          "[interp][streams]") {
  const unsigned flags = GENERATE(unsigned{cudaStreamDefault}, unsigned{cudaStreamNonBlocking});
  Floats x, y;
  Stream s(flags);
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  REQUIRE(cudaMemcpyAsync(y.p, x.p, kN * sizeof(float), cudaMemcpyDeviceToDevice, nullptr) == cudaSuccess);
  launch_kernel(add_one, 2, 32, 0, s.s, y.p, kN);  // a blocking stream's work waits for the legacy copy
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const bool blocking = flags == cudaStreamDefault;
  INFO((blocking ? "blocking stream" : "non-blocking stream"));
  CHECK(x.p[0] == 1.0f);
  // Blocking: kernel, copy, kernel in issue order. Non-blocking: the stream's second kernel was
  // issued last and runs first, its first kernel next, the legacy copy last: y is x.
  CHECK(y.p[0] == (blocking ? 2.0f : 1.0f));
}

TEST_CASE("interpret mode faults a copy whose pinned source the host changed before the copy ran",
          "[interp][streams]") {
  Floats x;
  Stream s(cudaStreamNonBlocking);
  Event copied;
  Pinned staging(kN * sizeof(float));
  for (int i = 0; i < kN; ++i) staging.floats()[i] = 7.0f;
  REQUIRE(cudaMemcpyAsync(x.p, staging.p, kN * sizeof(float), cudaMemcpyHostToDevice, s.s) == cudaSuccess);
  REQUIRE(cudaEventRecord(copied.e, s.s) == cudaSuccess);

  SECTION("reused after the copy's event: fine") {
    REQUIRE(cudaEventSynchronize(copied.e) == cudaSuccess);
    staging.floats()[1] = 8.0f;
    REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
    CHECK(x.p[1] == 7.0f);
  }
  SECTION("reused before it: the copy faults, naming the byte") {
    static_cast<unsigned char*>(staging.p)[5] = 0x12;  // a GPU would copy the new byte
    const cudaError_t synced = cudaStreamSynchronize(s.s);
    CHECK(synced == cudaErrorLaunchFailure);
    CHECK_THAT(cudaGetErrorString(synced),
               Contains("cudaMemcpyAsync: the host changed byte 5 of its 256-byte pinned source"));
    cudaDeviceReset();  // so that the fault does not outlive the case; it freed x's memory
    x.p = nullptr;
  }
}

TEST_CASE("interpret mode fills a pinned download's destination with 0xFF until the copy runs", "[interp][streams]") {
  Floats x;
  Stream s(cudaStreamNonBlocking);
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  Pinned arrived(kN * sizeof(float));
  std::memset(arrived.p, 0, kN * sizeof(float));
  REQUIRE(cudaMemcpyAsync(arrived.p, x.p, kN * sizeof(float), cudaMemcpyDeviceToHost, s.s) == cudaSuccess);
  std::uint32_t bits = 0;
  std::memcpy(&bits, arrived.floats() + 3, sizeof bits);
  CHECK(bits == 0xFFFFFFFFu);  // a NaN: the host read without waiting
  REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
  CHECK(arrived.floats()[3] == 1.0f);
}

TEST_CASE("interpret mode holds a stream at gated work until its gate opens: queries say not ready, waits wait",
          "[interp][streams]") {
  Floats x, y;
  Stream s(cudaStreamNonBlocking), other(cudaStreamNonBlocking);
  int asked = 0, open_at = 3;  // the gate opens at its third question (another process's part arrives)
  const auto gate = [&]() -> xtrain::interp::GateState { return {++asked >= open_at, ""}; };
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  REQUIRE(xtrain::interp::enqueue_gated(s.s, "gated", gate, [&] { x.p[0] *= 10.0f; }) == cudaSuccess);
  launch_kernel(add_one, 2, 32, 0, s.s, x.p, kN);
  launch_kernel(add_one, 1, 32, 0, other.s, y.p, 1);
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);  // asked once: nothing runs
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);  // asked again: runs up to the closed gate
  CHECK(x.p[0] == 1.0f);
  CHECK(asked == 1);
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);  // still closed: the work after it waits too
  CHECK(x.p[2] == 1.0f);
  CHECK(cudaStreamQuery(s.s) == cudaSuccess);  // open: the gated work and the rest ran
  CHECK(x.p[0] == 11.0f);
  CHECK(x.p[2] == 2.0f);

  SECTION("a stream wait waits for the gate") {
    asked = 0;
    open_at = 50;
    REQUIRE(xtrain::interp::enqueue_gated(s.s, "gated", gate, [&] { x.p[0] = -1.0f; }) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
    CHECK(asked == 50);
    CHECK(x.p[0] == -1.0f);
    CHECK(y.p[0] == 0.0f);  // the other stream's work is not this wait's
  }
  SECTION("a device wait runs the other streams while the gate is closed, then waits for it") {
    asked = 0;
    open_at = 20;
    REQUIRE(xtrain::interp::enqueue_gated(s.s, "gated", gate, [&] { x.p[0] = y.p[0]; }) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(x.p[0] == 1.0f);  // the other stream's kernel, issued before, ran while the gate was closed
  }
  SECTION("capturing gated work is refused") {
    REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    CHECK(xtrain::interp::enqueue_gated(s.s, "gated", gate, [] {}) == cudaErrorStreamCaptureUnsupported);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(s.s, &graph);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
}

TEST_CASE("interpret mode faults a host wait on gated work that will never run, where a GPU's host would hang",
          "[interp][streams]") {
  Floats x;
  Stream s(cudaStreamNonBlocking);
  bool ran = false;
  const auto gate = []() -> xtrain::interp::GateState { return {false, "rank 1 exited without its part"}; };
  REQUIRE(xtrain::interp::enqueue_gated(s.s, "ncclAllReduce", gate, [&] { ran = true; }) == cudaSuccess);
  // A query only says "not ready", as a GPU's would while NCCL's kernel waits: a poll can give up.
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);
  CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);
  CHECK(cudaGetLastError() == cudaSuccess);
  const cudaError_t synced = cudaStreamSynchronize(s.s);
  CHECK(synced == cudaErrorLaunchFailure);
  CHECK_THAT(cudaGetErrorString(synced), Contains("ncclAllReduce: rank 1 exited without its part; a GPU's host would "
                                                  "wait here for good"));
  CHECK_FALSE(ran);
  cudaDeviceReset();
  x.p = nullptr;
}
