// What every attempt gets fresh: a free MASTER_PORT and, for NCCL, a new unique id, so that a
// restart never meets the previous attempt's half-closed sockets and concurrent jobs never clash.
#pragma once

#include <string>

#include "common/worker_env.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/rendezvous/rendezvous.hpp"

namespace xtrain::launcher {

// Binds port 0 on `address`, reads the port back and closes. Throws LaunchError (125).
int pick_free_port(const std::string& address);

// `run_id` names the run; the attempt's id appends "-a<attempt>".
// `round`: several nodes; node 0 picked the master port and the NCCL id for every node.
AttemptEnv make_attempt_env(const Plan& plan, const std::string& run_id, int restart_count,
                            const RoundResult* round = nullptr);

}  // namespace xtrain::launcher
