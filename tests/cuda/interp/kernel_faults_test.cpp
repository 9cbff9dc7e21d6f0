// Interpret mode catches what a GPU would show (or hide): each test plants one fault in a small
// test-only kernel and checks that the launch fails with the real error code and a message naming
// the kernel, the block, the thread and what went wrong — and never hangs. The kernels are
// compiled as the backend's are (this file is an instrumented kernel unit).
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cuda/kernels/portable.cuh"

// A named namespace: a fault names its kernel through the dynamic symbol table, which has no
// functions of internal linkage.
namespace xtrain::interp_test {

using Catch::Matchers::Contains;
using xtrain::cuda::launch_kernel;

// Launches and returns the message the launch check throws ("" when it does not), then resets
// the device so that the fault's sticky error does not outlive the test.
template <class... Params, class... Args>
std::string fault_of(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args... args) {
  std::string message;
  try {
    launch_kernel(kernel, grid, block, shared, nullptr, args...);
    const cudaError_t synced = cudaDeviceSynchronize();
    if (synced != cudaSuccess) message = cudaGetErrorString(synced);
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  cudaDeviceReset();
  return message;
}

float* device_floats(size_t n) {
  float* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemset(p, 0, n * sizeof(float)) == cudaSuccess);
  return p;
}

// ---- the planted faults ---------------------------------------------------------------------

__global__ void read_after_write_without_barrier(float* out) {
  XTRAIN_SHARED(float, s, [64]);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[threadIdx.x > 0 ? threadIdx.x - 1 : 0];  // the neighbour's value, no __syncthreads between
}

__global__ void write_after_read_without_barrier(float* out) {
  XTRAIN_SHARED(float, s, [64]);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  const float next = s[(threadIdx.x + 1) % 64];
  s[threadIdx.x] = next + 1.0f;  // a shift in place: overwrites what the neighbour may not have read yet
  out[threadIdx.x] = next;
}

__global__ void barrier_separated(float* out) {
  XTRAIN_SHARED(float, s, [64]);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

__global__ void last_block_wins(float* out) {
  if (threadIdx.x == 0) out[0] = static_cast<float>(blockIdx.x);  // order-dependent across blocks
}

__global__ void reads_past_the_end(float* out, int n) { out[threadIdx.x] = out[threadIdx.x + n]; }

__global__ void writes_past_a_shared_array(float* out) {
  XTRAIN_SHARED(float, tile, [32]);
  tile[threadIdx.x + 1] = 1.0f;  // thread 31 writes tile[32]
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x];
}

__global__ void reads_past_dynamic_shared(float* out) {
  XTRAIN_DYNAMIC_SHARED(float, dyn);
  dyn[threadIdx.x] = 0.0f;
  __syncthreads();
  out[threadIdx.x] = dyn[threadIdx.x + 32];  // the launch gave 32 floats
}

__global__ void reads_uninitialised_shared(float* out) {
  XTRAIN_SHARED(float, s, [64]);
  if (threadIdx.x < 32) s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];  // threads 32-63 read what nobody wrote
}

__global__ void barrier_in_divergent_code(float* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block waits forever on a GPU
  out[threadIdx.x] = 1.0f;
}

__global__ void returns_before_the_barrier(float* out) {
  if (threadIdx.x == 5) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

__global__ void shuffle_with_a_lane_missing(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x % 32 != 3) v = __shfl_xor_sync(0xFFFFFFFFu, v, 1);
  out[threadIdx.x] = v;
}

__global__ void reads_host_memory(float* out, const float* host) { out[threadIdx.x] = host[threadIdx.x]; }

__global__ void idle(float* out) { out[threadIdx.x] = 0.0f; }

}  // namespace xtrain::interp_test

using namespace xtrain::interp_test;

TEST_CASE("interpret mode reports a shared-memory read after another thread's write without a barrier",
          "[interp][faults]") {
  float* out = device_floats(64);
  const std::string m = fault_of(read_after_write_without_barrier, 1, 64, 0, out);
  CHECK_THAT(m, Contains("cudaErrorLaunchFailure"));
  CHECK_THAT(m, Contains("read_after_write_without_barrier"));
  CHECK_THAT(m, Contains("block (0,0,0), thread ("));
  CHECK_THAT(m, Contains("shared memory race: read of \"s\""));
}

TEST_CASE("interpret mode reports a shared-memory write over what another thread reads without a barrier",
          "[interp][faults]") {
  float* out = device_floats(64);
  const std::string m = fault_of(write_after_read_without_barrier, 1, 64, 0, out);
  CHECK_THAT(m, Contains("write_after_read_without_barrier"));
  CHECK_THAT(m, Contains("shared memory race: write of \"s\""));
}

TEST_CASE("interpret mode passes the same exchange with a barrier, under three schedules", "[interp][faults]") {
  float* out = device_floats(64);
  CHECK(fault_of(barrier_separated, 1, 64, 0, out).empty());
}

TEST_CASE("interpret mode reports results that depend on the order of blocks", "[interp][faults]") {
  float* out = device_floats(1);
  const std::string m = fault_of(last_block_wins, 8, 32, 0, out);
  CHECK_THAT(m, Contains("last_block_wins"));
  CHECK_THAT(m, Contains("results differ between the in-order schedule and the reversed one"));
}

TEST_CASE("interpret mode reports a global read past the end of an allocation", "[interp][faults]") {
  float* out = device_floats(64);
  const std::string m = fault_of(reads_past_the_end, 1, 64, 0, out, 60);
  CHECK_THAT(m, Contains("cudaErrorIllegalAddress"));
  CHECK_THAT(m, Contains("reads_past_the_end"));
  CHECK_THAT(m, Contains("thread (4,0,0)"));  // the first thread past the end: 4 + 60 = 64
  CHECK_THAT(m, Contains("global memory access of 4 bytes: address is 0 bytes past the end of an allocation of 256"));
}

TEST_CASE("interpret mode bounds-checks shared memory against its declaration and the launch's dynamic size",
          "[interp][faults]") {
  float* out = device_floats(32);
  const std::string declared = fault_of(writes_past_a_shared_array, 1, 32, 0, out);
  CHECK_THAT(declared, Contains("thread (31,0,0)"));
  CHECK_THAT(declared, Contains("past the end of \"tile\" (128 bytes)"));
  out = device_floats(32);
  const std::string dynamic = fault_of(reads_past_dynamic_shared, 1, 32, 32 * sizeof(float), out);
  CHECK_THAT(dynamic, Contains("past the end of \"dynamic shared memory\" (128 bytes)"));
}

TEST_CASE("interpret mode reports a read of shared memory no thread of the block wrote", "[interp][faults]") {
  float* out = device_floats(64);
  const std::string m = fault_of(reads_uninitialised_shared, 1, 64, 0, out);
  CHECK_THAT(m, Contains("thread (32,0,0)"));
  CHECK_THAT(m, Contains("read of uninitialised shared memory"));
}

TEST_CASE("interpret mode fails, never hangs, on a barrier not every thread reaches", "[interp][faults]") {
  float* out = device_floats(64);
  const std::string divergent = fault_of(barrier_in_divergent_code, 1, 64, 0, out);
  CHECK_THAT(divergent, Contains("barrier_in_divergent_code"));
  CHECK_THAT(divergent, Contains("returned without reaching the __syncthreads that 16 of the block's 64 threads"));
  out = device_floats(64);
  const std::string early = fault_of(returns_before_the_barrier, 1, 64, 0, out);
  CHECK_THAT(early, Contains("thread (5,0,0): returned without reaching the __syncthreads"));
}

TEST_CASE("interpret mode fails, never hangs, on a warp collective with a lane missing", "[interp][faults]") {
  float* out = device_floats(64);
  const std::string m = fault_of(shuffle_with_a_lane_missing, 1, 64, 0, out);
  CHECK_THAT(m, Contains("__shfl_xor_sync with mask 0xffffffff: lane 3 has returned"));
}

TEST_CASE("interpret mode reports a kernel reading host memory", "[interp][faults]") {
  float* out = device_floats(32);
  std::vector<float> host(32, 1.0f);
  const std::string m = fault_of(reads_host_memory, 1, 32, 0, out, static_cast<const float*>(host.data()));
  CHECK_THAT(m, Contains("cudaErrorIllegalAddress"));
  CHECK_THAT(m, Contains("read of host memory"));
}

TEST_CASE("interpret mode refuses the launches a GPU refuses", "[interp][faults]") {
  float* out = device_floats(2048);
  CHECK_THAT(fault_of(idle, 1, 2048, 0, out), Contains("cudaErrorInvalidConfiguration"));
  out = device_floats(64);
  CHECK_THAT(fault_of(idle, 1, 64, 64 * 1024, out),
             Contains("cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize) first"));
  out = device_floats(64);
  REQUIRE(cudaFuncSetAttribute(idle, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  CHECK(fault_of(idle, 1, 64, 64 * 1024, out).empty());
  CHECK(cudaFuncSetAttribute(idle, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024) == cudaErrorInvalidValue);
}
