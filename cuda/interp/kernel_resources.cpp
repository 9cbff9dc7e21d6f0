#include "cuda/interp/kernel_resources.hpp"

#include "cuda/interp/executor.hpp"
#include "cuda/interp/shared_memory.hpp"

namespace xtrain::interp {

namespace {
constexpr int kRegistersPerBlock = 65536;
constexpr int kRegisterUnitPerWarp = 256;
constexpr int kWarpSize = 32;
}  // namespace

const KernelResources* find_gpu_kernel_resources(std::string_view name, int sm) {
  for (const KernelResources& k : gpu_kernel_resources()) {
    if (k.sm == sm && name == k.name) return &k;
  }
  return nullptr;
}

const KernelResources* find_gpu_kernel_resources_at(const void* kernel, int sm) {
  const char* symbol = kernel_symbol(kernel);
  return symbol == nullptr ? nullptr : find_gpu_kernel_resources(symbol, sm);
}

std::optional<LaunchRefusal> gpu_launch_refusal(const KernelResources& k, unsigned threads_per_block,
                                                size_t dynamic_shared_bytes, size_t dynamic_shared_allowed) {
  const std::string sm = " on sm_" + std::to_string(k.sm);
  if (k.max_threads > 0 && threads_per_block > static_cast<unsigned>(k.max_threads)) {
    return LaunchRefusal{cudaErrorInvalidValue, std::to_string(threads_per_block) +
                                                    " threads per block, over its __launch_bounds__ of " +
                                                    std::to_string(k.max_threads) + sm};
  }
  const int warps = static_cast<int>((threads_per_block + kWarpSize - 1) / kWarpSize);
  const int per_warp = (k.registers * kWarpSize + kRegisterUnitPerWarp - 1) / kRegisterUnitPerWarp * kRegisterUnitPerWarp;
  if (warps * per_warp > kRegistersPerBlock) {
    return LaunchRefusal{cudaErrorLaunchOutOfResources,
                         std::to_string(threads_per_block) + " threads per block at " + std::to_string(k.registers) +
                             " registers each" + sm + " need " + std::to_string(warps * per_warp) +
                             " registers, over the block's 65536 (too many resources requested for launch)"};
  }
  // The dynamic part's own limit (48 KiB, or what cudaFuncSetAttribute allowed) is the runtime's
  // check for every kernel; the static part is known only here.
  const size_t shared = static_cast<size_t>(k.static_shared_bytes) + dynamic_shared_bytes;
  const size_t limit = dynamic_shared_allowed > 0 ? kSharedOptinLimit : kStaticSharedLimit;
  if (shared > limit) {
    return LaunchRefusal{cudaErrorInvalidValue, std::to_string(k.static_shared_bytes) + " bytes of static and " +
                                                    std::to_string(dynamic_shared_bytes) + " of dynamic shared memory" +
                                                    sm + ", over the block's " + std::to_string(limit / 1024) + " KiB"};
  }
  return std::nullopt;
}

}  // namespace xtrain::interp
