// What a GPU refuses for its registers, launch bounds and shared memory, which the host compiler
// cannot see: the rule (cuda/interp/kernel_resources.hpp) on made-up kernels, and, where the build
// has nvcc, the GPU build's own table: every kernel of ours free of local memory, and launches of
// two backend kernels refused as a GPU would refuse them.
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "cuda/interp/executor.hpp"
#include "cuda/interp/kernel_resources.hpp"
#include "tests/cuda/interp/interp_test_util.hpp"

namespace xtrain::interp {
namespace {

using Catch::Matchers::Contains;

KernelResources kernel(int registers, int max_threads, int static_shared = 0) {
  return KernelResources{"made_up", 90, registers, static_shared, 0, 0, 0, max_threads};
}

std::string refusal(const KernelResources& k, unsigned threads, size_t dynamic = 0, size_t allowed = 0) {
  const auto r = gpu_launch_refusal(k, threads, dynamic, allowed);
  return r ? std::string(cudaGetErrorName(r->error)) + ": " + r->why : "";
}

TEST_CASE("interpret mode's launch rule: launch bounds, registers per block, shared memory", "[interp][resources]") {
  // 255 registers round up to 8 x 256 per warp (granularity 256): 8 warps take exactly 65,536.
  CHECK(refusal(kernel(255, 256), 256).empty());
  const std::string over_bounds = refusal(kernel(255, 256), 288);
  CHECK_THAT(over_bounds, Contains("cudaErrorInvalidValue"));
  CHECK_THAT(over_bounds, Contains("288 threads per block, over its __launch_bounds__ of 256 on sm_90"));

  // Without bounds, the registers decide. 70 a thread are 2,240 a warp, allocated as 2,304:
  // 28 warps fit (64,512), 29 do not (66,816), though 29 x 2,240 = 64,960 would.
  CHECK(refusal(kernel(70, 0), 28 * 32).empty());
  const std::string over_registers = refusal(kernel(70, 0), 29 * 32);
  CHECK_THAT(over_registers, Contains("cudaErrorLaunchOutOfResources"));
  CHECK_THAT(over_registers, Contains("928 threads per block at 70 registers each on sm_90 need 66816 registers"));
  CHECK(refusal(kernel(64, 0), 1024).empty());  // 32 warps x 2,048
  // 65 registers are 2,304 a warp: 28 warps fit; a 29th, even partly used, does not.
  CHECK(refusal(kernel(65, 0), 28 * 32).empty());
  CHECK_THAT(refusal(kernel(65, 0), 28 * 32 + 1), Contains("897 threads per block at 65 registers each on sm_90 need "
                                                          "66816 registers, over the block's 65536 (too many "
                                                          "resources requested for launch)"));

  // Static and dynamic shared memory together: 48 KiB, or 227 KiB once the dynamic limit is raised.
  CHECK(refusal(kernel(32, 0, 40 * 1024), 128, 8 * 1024).empty());
  const std::string over_shared = refusal(kernel(32, 0, 40 * 1024), 128, 16 * 1024);
  CHECK_THAT(over_shared, Contains("cudaErrorInvalidValue"));
  CHECK_THAT(over_shared, Contains("40960 bytes of static and 16384 of dynamic shared memory on sm_90, over the "
                                   "block's 48 KiB"));
  CHECK(refusal(kernel(32, 0, 40 * 1024), 128, 16 * 1024, 16 * 1024).empty());
  CHECK_THAT(refusal(kernel(32, 0, 8 * 1024), 128, 220 * 1024, 220 * 1024), Contains("over the block's 227 KiB"));
}

#ifdef XTRAIN_HAVE_KERNEL_TABLE

TEST_CASE("every kernel of the GPU build runs without local memory on every architecture built",
          "[interp][resources]") {
  // Local memory is a spill (or an array the registers cannot hold): L1 traffic, often L2 and
  // HBM, on a kernel's hot path. CUB's own kernels are CUB's business.
  CHECK_THAT(std::string(gpu_kernel_table_ptxas()), Contains("ptxas release"));
  std::map<int, int> ours;  // kernels of ours per architecture
  for (const KernelResources& k : gpu_kernel_resources()) {
    if (std::string(k.name).rfind("_ZN6xtrain", 0) != 0) continue;
    ++ours[k.sm];
    INFO(readable_kernel_name(k.name) << " on sm_" << k.sm << ": " << k.registers << " registers ("
                                      << gpu_kernel_table_ptxas() << ")");
    CHECK(k.stack_frame_bytes == 0);
    CHECK(k.spill_store_bytes == 0);
    CHECK(k.spill_load_bytes == 0);
  }
  // Every variant the backend instantiates (attention's head sizes, layernorm's row widths, ...),
  // the same for every architecture, the emulated device's among them.
  REQUIRE(ours.count(kEmulatedSm) == 1);
  for (const auto& [sm, count] : ours) {
    INFO("sm_" << sm);
    CHECK(count == ours[kEmulatedSm]);
    CHECK(count > 60);
  }
}

// A backend kernel by its mangled name, as the interpreted library exports it.
template <class Kernel>
Kernel* exported(const char* name) {
  void* symbol = dlsym(RTLD_DEFAULT, name);
  REQUIRE(symbol != nullptr);
  return reinterpret_cast<Kernel*>(symbol);
}

TEST_CASE("interpret mode refuses a backend kernel's launch that its registers or launch bounds forbid on a GPU",
          "[interp][resources]") {
  // sum_squares_final_kernel: __launch_bounds__(256).
  const char* final_sum = "_ZN6xtrain4cuda24sum_squares_final_kernelEPdPKd";
  auto* sum = exported<void(double*, const double*)>(final_sum);
  const KernelResources* sum_k = find_gpu_kernel_resources_at(reinterpret_cast<const void*>(sum), kEmulatedSm);
  REQUIRE(sum_k != nullptr);
  CHECK(sum_k->max_threads == 256);
  const std::string over_bounds =
      test::fault_of(sum, 1, 512, 0, static_cast<double*>(nullptr), static_cast<const double*>(nullptr));
  CHECK_THAT(over_bounds, Contains("xtrain::cuda::sum_squares_final_kernel"));
  CHECK_THAT(over_bounds, Contains("512 threads per block, over its __launch_bounds__ of 256 on sm_90"));

  // The layernorm forward of rows of 2,048 floats (16 packs a lane): no bounds, and over 64
  // registers a thread, so 1,024 threads need more than a block's 65,536.
  const char* wide_rows = "_ZN6xtrain4cuda28row_layernorm_forward_kernelIfLi16EEEvPT_S3_PfS4_PKS2_S6_S6_S6_ii";
  auto* ln = exported<void(float*, float*, float*, float*, const float*, const float*, const float*, const float*, int,
                           int)>(wide_rows);
  const KernelResources* ln_k = find_gpu_kernel_resources_at(reinterpret_cast<const void*>(ln), kEmulatedSm);
  REQUIRE(ln_k != nullptr);
  REQUIRE(ln_k->max_threads == 0);
  REQUIRE(ln_k->registers > 64);
  float* none = nullptr;
  const float* none_in = nullptr;
  const std::string over_registers =
      test::fault_of(ln, 1, 1024, 0, none, none, none, none, none_in, none_in, none_in, none_in, 0, 0);
  CHECK_THAT(over_registers, Contains("cudaErrorLaunchOutOfResources"));
  CHECK_THAT(over_registers, Contains("1024 threads per block at " + std::to_string(ln_k->registers) + " registers each on sm_90"));
}

#endif

}  // namespace
}  // namespace xtrain::interp
