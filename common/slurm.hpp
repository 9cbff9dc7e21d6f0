// What a node learns for a multi-node job from SLURM's environment, and the job token.
//
// Under `srun xlaunch job.json` (one task per node) SLURM tells each xlaunch the node count,
// its node's index and the host list; node 0 of the list hosts the rendezvous store, on a port
// derived from the job id, so every node computes the same endpoint without talking first.
//
// Job token threat model. The token keeps foreign clients out of the rendezvous store:
//  - XTRAIN_JOB_TOKEN, when set, is used as is. Put a random secret there in the batch script
//    (SLURM copies the script's environment to every task; other users cannot read a process's
//    environment): this keeps out other users' processes, even ones that try on purpose.
//  - Otherwise, under SLURM, the token is derived from the job id and the user id. Both are
//    visible to every user of the cluster (squeue), so this token is NOT a secret: it keeps out
//    clients of other jobs by accident (a stale job whose port collides, another job's nodes),
//    not a user who sets out to join.
//  - The token travels in clear text (kv_protocol.hpp): anyone who can read the traffic between
//    the nodes can read it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/job_spec.hpp"

namespace xtrain {

// A SLURM variable is missing or malformed; the message names it and its value.
class SlurmError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using EnvMap = std::map<std::string, std::string>;

// Expands a SLURM host list: comma-separated host expressions, each with any number of bracket
// groups of comma-separated numbers and ranges, expanded in order, the last group fastest:
//   "node[01-03,07],gpu-a[1-2],login"  -> node01 node02 node03 node07 gpu-a1 gpu-a2 login
//   "r[1-2]n[8-9]"                      -> r1n8 r1n9 r2n8 r2n9
// A range keeps the low bound's zero padding ("[08-10]" -> 08 09 10). Throws SlurmError naming
// the list and the position for unbalanced or nested brackets, empty names or ranges, a low
// bound above the high one, and expansions of more than `max_hosts` names.
std::vector<std::string> expand_hostlist(std::string_view list, std::size_t max_hosts = 65536);

// The rendezvous store's port for a SLURM job: 20000 + job_id % 10000, so within [20000, 29999],
// below Linux's ephemeral range (32768-60999) where outgoing connections take their ports. Two
// jobs whose ids differ by a multiple of 10000 and share node 0 collide: the second one's bind
// fails with a clear error, and the token keeps their clients apart.
inline constexpr int kSlurmPortBase = 20000;
inline constexpr int kSlurmPortSpan = 10000;
int slurm_rdzv_port(std::uint64_t job_id);

// The token derived from a SLURM job (not a secret; see the threat model above).
std::string slurm_job_token(std::uint64_t job_id, std::uint64_t uid);

struct SlurmStep {
  std::uint64_t job_id = 0;
  int nnodes = 1;
  int node_rank = 0;
  std::vector<std::string> hosts;  // the step's nodes, in SLURM's order; hosts[0] is node 0
  std::string rdzv_endpoint;       // hosts[0]:slurm_rdzv_port(job_id)

  // The spec's nodes section as SLURM defines it, with the caller's timeout.
  NodesSpec nodes(double rdzv_timeout_s) const;
};

// Reads the step from `env`: std::nullopt when SLURM_JOB_ID is not set (not under SLURM).
// Variables, first one present wins:
//   job id      SLURM_JOB_ID
//   host list   SLURM_STEP_NODELIST, SLURM_JOB_NODELIST, SLURM_NODELIST
//   node count  SLURM_STEP_NUM_NODES, SLURM_NNODES, SLURM_JOB_NUM_NODES (must match the list)
//   node rank   SLURM_NODEID (this node's index within the step)
//   tasks       SLURM_STEP_NUM_TASKS: xlaunch wants one task per node
// Outside a step (SLURM_STEP_ID unset: the batch script itself) only a one-node allocation is
// accepted: an xlaunch there cannot start the other nodes. Throws SlurmError naming the variable.
std::optional<SlurmStep> read_slurm_step(const EnvMap& env);

// The job token: XTRAIN_JOB_TOKEN when set and not empty; else, under SLURM, slurm_job_token
// of SLURM_JOB_ID and the user (SLURM_JOB_UID, else `process_uid`); else std::nullopt, and a
// multi-node job must refuse to start. Throws SlurmError for a malformed SLURM_JOB_ID.
inline constexpr const char* kJobTokenVariable = "XTRAIN_JOB_TOKEN";
std::optional<std::string> resolve_job_token(const EnvMap& env, std::uint64_t process_uid);

}  // namespace xtrain
