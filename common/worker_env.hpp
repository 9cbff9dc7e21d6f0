// The environment contract between xlaunch and each rank (torchrun's names plus XTRAIN_*).
// The launcher builds it with build_worker_env; a worker reads it back with read_worker_env.
#pragma once

#include <map>
#include <string>

#include "common/job_spec.hpp"

namespace xtrain {

namespace env {
inline constexpr const char* kRank = "RANK";
inline constexpr const char* kWorldSize = "WORLD_SIZE";
inline constexpr const char* kLocalRank = "LOCAL_RANK";
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";
inline constexpr const char* kGroupRank = "GROUP_RANK";
// torchrun's (torch.distributed.elastic) other variables: the node count, the rank and world
// within the one role every rank has, the role's name, and the restart counters and run id.
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kElasticRestartCount = "TORCHELASTIC_RESTART_COUNT";
inline constexpr const char* kElasticMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kElasticRunId = "TORCHELASTIC_RUN_ID";
// Where a PyTorch script's @record (torch.distributed.elastic) writes its uncaught exception.
inline constexpr const char* kElasticErrorFile = "TORCHELASTIC_ERROR_FILE";
// "False", as torchrun's static rendezvous says: rank 0's script serves the store at MASTER_PORT
// (a "True" left by an enclosing torchrun would make every rank wait for an agent's store).
inline constexpr const char* kElasticUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// PyTorch's NCCL watchdog aborts a collective that fails or times out instead of leaving the rank
// blocked: torchrun sets 1 unless the environment chose, and so does xlaunch.
inline constexpr const char* kTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kNcclId = "XTRAIN_NCCL_ID";
inline constexpr const char* kRunId = "XTRAIN_RUN_ID";
inline constexpr const char* kRunDir = "XTRAIN_RUN_DIR";
inline constexpr const char* kJob = "XTRAIN_JOB";
inline constexpr const char* kRestartCount = "XTRAIN_RESTART_COUNT";
inline constexpr const char* kMaxRestarts = "XTRAIN_MAX_RESTARTS";
inline constexpr const char* kResultFile = "XTRAIN_RESULT_FILE";
inline constexpr const char* kHeartbeatFile = "XTRAIN_HEARTBEAT_FILE";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
// Jobs on several nodes only: node 0's rendezvous store ("host:port"), the job token that opens
// it, and this node's address as the other nodes reach it (where a Gloo rank listens).
inline constexpr const char* kStoreEndpoint = "XTRAIN_STORE_ENDPOINT";
inline constexpr const char* kJobToken = "XTRAIN_JOB_TOKEN";
inline constexpr const char* kNodeAddr = "XTRAIN_NODE_ADDR";
}  // namespace env

// Where one rank sits in the world.
struct RankPlacement {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
};

// What one restart attempt shares across its ranks.
struct AttemptEnv {
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string nccl_id_hex;     // empty unless the backend is NCCL
  std::string run_id;          // unique per run and attempt: <name>-<time>-<pid>-a<attempt>
  std::string elastic_run_id;  // TORCHELASTIC_RUN_ID: --rdzv-id, else the run's id (node 0's, every attempt)
  std::string role_name = "default";  // ROLE_NAME: --role
  std::string run_dir;         // absolute
  std::string job_path;        // absolute path of the resolved job.json
  int restart_count = 0;
  int max_restarts = 0;
  std::string store_endpoint;  // empty on one node; else node 0's rendezvous store
  std::string job_token;       // with store_endpoint
  std::string node_addr;       // with store_endpoint
};

// True for the variables xlaunch owns; worker.env may not set them.
bool is_contract_variable(const std::string& name);

// Full environment for one rank: `inherited` (the launcher's own), then the contract variables,
// then the spec's worker.env. `cores` feeds the OMP_NUM_THREADS default.
std::map<std::string, std::string> build_worker_env(const JobSpec& spec, const RankPlacement& where,
                                                    const AttemptEnv& attempt,
                                                    std::map<std::string, std::string> inherited,
                                                    unsigned cores);

// Files a rank writes in the run directory.
std::string result_file_path(const std::string& run_dir, int rank);     // ranks/rank-R.json
std::string heartbeat_file_path(const std::string& run_dir, int rank);  // ranks/rank-R.heartbeat
std::string backtrace_file_path(const std::string& run_dir, int rank);  // ranks/rank-R.backtrace
std::string elastic_error_file_path(const std::string& run_dir, int rank);  // ranks/rank-R.error.json

// What a worker learns from its environment. With no RANK set it is a world of one.
struct WorkerEnv {
  RankPlacement where;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  std::string nccl_id_hex;
  std::string run_id = "local";
  std::string run_dir;
  std::string job_path;
  int restart_count = 0;
  std::string result_file;
  std::string heartbeat_file;
  std::string store_endpoint;  // empty: one node (Gloo meets through files in the run dir)
  std::string job_token;
  std::string node_addr;
};

// Throws std::invalid_argument naming the variable when a value is malformed.
WorkerEnv read_worker_env();

}  // namespace xtrain
