// NCCL, for a job whose backend is NCCL: opened with dlopen (linking it would cost every xlaunch
// start about 5 ms) by the rule the workers follow (common/gpu/nccl_library.hpp).
#pragma once

#include <map>
#include <string>

#include "common/gpu/nccl_library.hpp"

namespace xtrain::launcher {

// Loads libnccl, resolved with the environment the ranks get, so both use one library; once per
// process (later calls return the first). Throws LaunchError (125) when it cannot.
const NcclLibrary& require_nccl(const std::map<std::string, std::string>& rank_env);

// ncclGetUniqueId, hex-encoded (common/gpu/nccl_id.hpp), from the library require_nccl loaded (or,
// without that call, the one this process's environment resolves to). Throws LaunchError (125).
// In CUDA interpret mode, whose NCCL is its plugin's, random bytes.
std::string nccl_unique_id_hex();

}  // namespace xtrain::launcher
