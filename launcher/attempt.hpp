// What every attempt gets fresh: a free MASTER_PORT and, for NCCL, a new unique id, so that a
// restart never meets the previous attempt's half-closed sockets and concurrent jobs never clash.
#pragma once

#include <map>
#include <string>

#include "common/gpu/nccl_library.hpp"
#include "common/worker_env.hpp"
#include "launcher/plan.hpp"
#include "launcher/rendezvous.hpp"

namespace xtrain::launcher {

// Binds port 0 on `address`, reads the port back and closes. Throws LaunchError (125).
int pick_free_port(const std::string& address);

// Loads libnccl by the rule the workers follow (common/gpu/nccl_library.hpp), resolved with the
// environment the ranks get, so both use one library; once per process (later calls return the
// first). Throws LaunchError (125) when it cannot. NCCL is opened only when a job's backend is
// NCCL: linking it would cost every xlaunch start about 5 ms.
const NcclLibrary& require_nccl(const std::map<std::string, std::string>& rank_env);

// ncclGetUniqueId, hex-encoded (common/gpu/nccl_id.hpp), from the library require_nccl loaded (or,
// without that call, the one this process's environment resolves to). Throws LaunchError (125).
std::string nccl_unique_id_hex();

// `run_id` names the run; the attempt's id appends "-a<attempt>".
// `round`: several nodes; node 0 picked the master port and the NCCL id for every node.
AttemptEnv make_attempt_env(const Plan& plan, const std::string& run_id, int restart_count,
                            const RoundResult* round = nullptr);

}  // namespace xtrain::launcher
