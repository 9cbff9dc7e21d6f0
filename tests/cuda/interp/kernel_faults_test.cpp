// Interpret mode catches what a GPU would show (or hide): each test plants one fault in a small
// test-only kernel and checks that the launch fails with the real error code and a message naming
// the kernel, the block, the thread and what went wrong — and never hangs. The kernels are
// compiled as the backend's are (this file is an instrumented kernel unit).
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/kernels/portable.cuh"
#include "tests/cuda/interp/interp_test_util.hpp"

// A named namespace: a fault names its kernel through the dynamic symbol table, which has no
// functions of internal linkage.
namespace xtrain::interp_test {

using Catch::Matchers::Contains;
using xtrain::cuda::launch_kernel;

using xtrain::interp::test::fault_of;

template <class T>
T* device_zeros(size_t n) {
  T* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemset(p, 0, n * sizeof(T)) == cudaSuccess);
  return p;
}
float* device_floats(size_t n) { return device_zeros<float>(n); }

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

// Block 0 adds 2^24, every other block 1: in order each 1 is lost to rounding (2^24 + 1 is a tie,
// to even), reversed the ones add up first and survive. Both are fp32 sums of the same adds.
__global__ void big_then_ones(float* out) {
  if (threadIdx.x == 0) atomicAdd(out, blockIdx.x == 0 ? 0x1p24f : 1.0f);
}

// The same with block 0 storing instead of adding: a plain store racing with the adds.
__global__ void store_among_adds(float* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    out[0] = 1000.0f;
  } else {
    atomicAdd(out, 1.0f);
  }
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

// ---- cp.async: 64 threads, each copying one 16-byte chunk (4 floats) of `in` ------------------

// After a barrier over -1s, copies chunk tid (odd threads with src-size 0: zeros) and reads the
// previous thread's chunk after `WAIT` and, when `BARRIER`, a __syncthreads.
template <bool WAIT, bool BARRIER>
__global__ void async_exchange(float* out, const float* in) {
  XTRAIN_SHARED(float, s, [64 * 4]);
  for (int i = 0; i < 4; ++i) s[4 * threadIdx.x + i] = -1.0f;
  __syncthreads();
  xtrain::cuda::cp_async_16(s + 4 * threadIdx.x, in + 4 * threadIdx.x, threadIdx.x % 2 == 0 ? 16 : 0);
  xtrain::cuda::cp_async_commit();
  if (WAIT) xtrain::cuda::cp_async_wait<0>();
  if (BARRIER) __syncthreads();
  const unsigned prev = (threadIdx.x + 63) % 64;
  for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = s[4 * prev + i];
  if (!WAIT) xtrain::cuda::cp_async_wait<0>();  // too late: the read above came first
}

// Double buffering with a wait one group too shallow: wait_group 1 covers the first group only,
// and the second is read anyway (the bug the pipelines' wait depth exists to avoid).
__global__ void async_wait_too_shallow(float* out, const float* in) {
  XTRAIN_SHARED(float, s, [2][64 * 4]);
  xtrain::cuda::cp_async_16(s[0] + 4 * threadIdx.x, in + 4 * threadIdx.x, 16);
  xtrain::cuda::cp_async_commit();
  xtrain::cuda::cp_async_16(s[1] + 4 * threadIdx.x, in + 4 * ((threadIdx.x + 1) % 64), 16);
  xtrain::cuda::cp_async_commit();
  xtrain::cuda::cp_async_wait<1>();
  __syncthreads();
  out[threadIdx.x] = s[0][4 * threadIdx.x] + s[1][4 * threadIdx.x];
  xtrain::cuda::cp_async_wait<0>();
}

__global__ void async_never_waited(float* out, const float* in) {
  XTRAIN_SHARED(float, s, [64 * 4]);
  xtrain::cuda::cp_async_16(s + 4 * threadIdx.x, in + 4 * threadIdx.x, 16);
  xtrain::cuda::cp_async_commit();
  out[threadIdx.x] = 0.0f;
}

// ---- ldmatrix: one warp over a 16 x 16 tile of 16-bit elements, rows padded to 24 -------------

constexpr int kTileStride = 24;  // elements per shared row: 48 bytes, rows stay 16-byte aligned

// Element (r, c) of the tile holds tag(r, c); every lane writes its four registers of the .x4
// load (trans or not) whose row addresses are rows lane % 16, columns 8 (lane / 16), i.e.
// matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (8-15, 8-15).
// The tile has 8 spare elements at its end, so that a shifted last row stays inside it.
// `shift` (elements) moves every row address off its 16-byte alignment; with `restore` every
// thread stores its elements again after the barrier, so loads and other threads' stores meet
// with no barrier between (a race, reported at whichever of the two comes second).
__host__ __device__ inline uint16_t tag(int r, int c) { return static_cast<uint16_t>(0x100 * r + c); }
__device__ inline void fill_tagged(uint16_t* tile) {
  for (int i = static_cast<int>(threadIdx.x); i < 16 * kTileStride + 8; i += 32) {
    tile[i] = i % kTileStride < 16 && i < 16 * kTileStride ? tag(i / kTileStride, i % kTileStride) : 0;
  }
}
template <bool TRANS>
__global__ void ldmatrix_tagged(uint32_t* out, int shift, bool restore) {
  XTRAIN_SHARED(uint16_t, tile, [16 * kTileStride + 8]);
  fill_tagged(tile);
  __syncthreads();
  if (restore) fill_tagged(tile);
  const int lane = static_cast<int>(threadIdx.x);
  uint32_t r[4];
  const uint16_t* row = tile + (lane % 16) * kTileStride + 8 * (lane / 16) + shift;
  if (TRANS) {
    xtrain::cuda::ldmatrix_x4_trans(r, row);
  } else {
    xtrain::cuda::ldmatrix_x4(r, row);
  }
  for (int m = 0; m < 4; ++m) out[4 * lane + m] = r[m];
}

__global__ void ldmatrix_from_global(uint32_t* out) {
  uint32_t r[4];
  xtrain::cuda::ldmatrix_x4(r, out + 4 * (threadIdx.x % 8));
  out[threadIdx.x] = r[0];
}

__global__ void ldmatrix_with_a_lane_missing(uint32_t* out) {
  XTRAIN_SHARED(uint16_t, tile, [32 * 8]);
  for (int i = 0; i < 8; ++i) tile[8 * threadIdx.x + i] = 0;
  __syncthreads();
  if (threadIdx.x == 7) return;
  uint32_t r[4];
  xtrain::cuda::ldmatrix_x4(r, tile + 8 * threadIdx.x);
  out[threadIdx.x] = r[0];
}

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

TEST_CASE("interpret mode lets atomic float adds differ by their order's rounding, and no more", "[interp][faults]") {
  float* out = device_floats(1);
  launch_kernel(big_then_ones, 64, 32, 0, nullptr, out);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  float sum = 0;
  REQUIRE(cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(sum >= 0x1p24f);
  CHECK(sum <= 0x1p24f + 64.0f);  // the in-order and reversed sums: 2^24 and 2^24 + 64
  cudaDeviceReset();

  float* raced = device_floats(1);
  const std::string m = fault_of(store_among_adds, 64, 32, 0, raced);
  CHECK_THAT(m, Contains("store_among_adds"));
  CHECK_THAT(m, Contains("63 atomic adds wrote") && Contains("more apart than their order can make"));
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
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);  // the refusal's error, cleared for the next case
}

TEST_CASE("interpret mode's cp.async lands at the issuer's wait, zero-filling past src-size, under three schedules",
          "[interp][faults][cp.async]") {
  std::vector<float> host(256);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i + 1);
  float* in = device_floats(256);
  REQUIRE(cudaMemcpy(in, host.data(), 256 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  float* out = device_floats(256);
  launch_kernel(async_exchange<true, true>, 1, 64, 0, nullptr, out, static_cast<const float*>(in));
  std::vector<float> got(256);
  REQUIRE(cudaMemcpy(got.data(), out, 256 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  for (int t = 0; t < 64; ++t) {
    const int prev = (t + 63) % 64;
    for (int i = 0; i < 4; ++i) CHECK(got[4 * t + i] == (prev % 2 == 0 ? host[4 * prev + i] : 0.0f));
  }
  cudaDeviceReset();
}

TEST_CASE("interpret mode reports a read of a cp.async destination before the issuer's wait", "[interp][faults][cp.async]") {
  float* in = device_floats(256);
  float* out = device_floats(256);
  const std::string m = fault_of(async_exchange<false, true>, 1, 64, 0, out, static_cast<const float*>(in));
  CHECK_THAT(m, Contains("async_exchange"));
  CHECK_THAT(m, Contains("read of \"s\""));
  CHECK_THAT(m, Contains("while a cp.async of thread"));
}

TEST_CASE("interpret mode reports a read of another thread's cp.async without a __syncthreads after its wait",
          "[interp][faults][cp.async]") {
  float* in = device_floats(256);
  float* out = device_floats(256);
  const std::string m = fault_of(async_exchange<true, false>, 1, 64, 0, out, static_cast<const float*>(in));
  CHECK_THAT(m, Contains("shared memory race: read of \"s\""));
}

TEST_CASE("interpret mode reports a cp.async group read after a wait_group that does not cover it",
          "[interp][faults][cp.async]") {
  float* in = device_floats(256);
  float* out = device_floats(64);
  const std::string m = fault_of(async_wait_too_shallow, 1, 64, 0, out, static_cast<const float*>(in));
  CHECK_THAT(m, Contains("async_wait_too_shallow"));
  CHECK_THAT(m, Contains("while a cp.async of thread"));
  in = device_floats(256);  // fault_of reset the device
  out = device_floats(64);
  const std::string never = fault_of(async_never_waited, 1, 64, 0, out, static_cast<const float*>(in));
  CHECK_THAT(never, Contains("returned with 1 cp.async copies that no cp.async.wait_group covered"));
}

TEST_CASE("interpret mode's ldmatrix.x4 gives the PTX ISA's fragments on a device, with and without .trans",
          "[interp][ldmatrix]") {
  uint32_t* out = device_zeros<uint32_t>(128);
  for (const bool trans : {false, true}) {
    if (trans) {
      launch_kernel(ldmatrix_tagged<true>, 1, 32, 0, nullptr, out, 0, false);
    } else {
      launch_kernel(ldmatrix_tagged<false>, 1, 32, 0, nullptr, out, 0, false);
    }
    std::vector<uint32_t> got(128);
    REQUIRE(cudaMemcpy(got.data(), out, 128 * sizeof(uint32_t), cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int lane = 0; lane < 32; ++lane)
      for (int m = 0; m < 4; ++m) {
        // Matrix m covers rows 8 (m % 2) .. + 7 and columns 8 (m / 2) .. + 7. PTX ISA, ldmatrix:
        // lane L holds elements 2 (L % 4) and + 1 of the matrix's row L / 4, low half first; with
        // .trans of its column L / 4.
        const int along = 2 * (lane % 4), across = lane / 4, r0 = 8 * (m % 2), c0 = 8 * (m / 2);
        uint32_t want = 0;
        for (int half = 0; half < 2; ++half) {
          const uint16_t e = trans ? tag(r0 + along + half, c0 + across) : tag(r0 + across, c0 + along + half);
          want |= static_cast<uint32_t>(e) << (16 * half);
        }
        INFO("lane " << lane << ", register " << m << ", trans " << trans);
        CHECK(got[static_cast<size_t>(4 * lane + m)] == want);
      }
  }
  cudaDeviceReset();
}

TEST_CASE("interpret mode reports an ldmatrix that breaks its rules", "[interp][faults][ldmatrix]") {
  uint32_t* out = device_zeros<uint32_t>(128);
  const std::string misaligned = fault_of(ldmatrix_tagged<false>, 1, 32, 0, out, 1, false);
  CHECK_THAT(misaligned, Contains("cudaErrorMisalignedAddress"));
  CHECK_THAT(misaligned, Contains("ldmatrix: row address"));
  CHECK_THAT(misaligned, Contains("is not 16-byte aligned"));
  out = device_zeros<uint32_t>(128);
  const std::string race = fault_of(ldmatrix_tagged<true>, 1, 32, 0, out, 0, true);
  CHECK_THAT(race, Contains("shared memory race"));
  CHECK_THAT(race, Contains("\"tile\""));
  out = device_zeros<uint32_t>(128);
  const std::string global = fault_of(ldmatrix_from_global, 1, 32, 0, out);
  CHECK_THAT(global, Contains("cudaErrorIllegalAddress"));
  CHECK_THAT(global, Contains("is not in shared memory"));
  out = device_zeros<uint32_t>(128);
  const std::string missing = fault_of(ldmatrix_with_a_lane_missing, 1, 32, 0, out);
  CHECK_THAT(missing, Contains("ldmatrix with mask 0xffffffff: lane 7 has returned"));
}
