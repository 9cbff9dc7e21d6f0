// What the GPU build's ptxas made of each kernel, and the launches that allows on a GPU.
//
// A GPU refuses a launch for reasons the host compiler cannot see: more threads than the kernel's
// __launch_bounds__, more registers than an SM has for one block, more shared memory (static and
// dynamic together) than the block may have. cuda/kernel_resources.cmake reads them off ptxas's
// report on the plugin's PTX, for every architecture built, into gpu_kernel_resources(); the
// runtime looks a launched kernel up by its (mangled) name and refuses what an H200 would. A build
// without nvcc has an empty table, and the checks are not made.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace xtrain::interp {

// The emulated device's architecture (an H200): the table's entries the runtime holds launches to.
constexpr int kEmulatedSm = 90;

struct KernelResources {
  const char* name;  // mangled: the PTX entry, and the interpreted kernel's symbol
  int sm;            // 80, 90
  int registers;     // per thread
  int static_shared_bytes;
  int stack_frame_bytes;  // local memory per thread: spills, or arrays the registers cannot hold
  int spill_store_bytes;
  int spill_load_bytes;
  int max_threads;  // __launch_bounds__'s threads per block (.maxntid); 0: no bound
};

// Every kernel of the GPU build, for every architecture it was built for (generated).
const std::vector<KernelResources>& gpu_kernel_resources();
// The ptxas that made the table ("ptxas release 13.0, V13.0.88"; "no ptxas" without nvcc).
const char* gpu_kernel_table_ptxas();

// The entry for `name` on sm_`sm`, or nullptr; by a kernel's address, through its symbol.
const KernelResources* find_gpu_kernel_resources(std::string_view name, int sm);
const KernelResources* find_gpu_kernel_resources_at(const void* kernel, int sm);

struct LaunchRefusal {
  cudaError_t error;
  std::string why;
};

// Why a GPU of compute capability 8.0 or 9.0 would refuse the launch, if it would (the CUDA
// programming guide's technical specifications): threads over the launch bounds; registers over
// the block's 65,536, allocated per warp in units of 256; static and dynamic shared memory
// together over 48 KiB, or over 227 KiB once cudaFuncSetAttribute raised the dynamic part's limit
// (`dynamic_shared_allowed`, 0 if never set; the dynamic part against that limit is the runtime's
// check, made for every kernel).
std::optional<LaunchRefusal> gpu_launch_refusal(const KernelResources& k, unsigned threads_per_block,
                                                size_t dynamic_shared_bytes, size_t dynamic_shared_allowed);

}  // namespace xtrain::interp
