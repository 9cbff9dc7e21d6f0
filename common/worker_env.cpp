#include "common/worker_env.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <stdexcept>

namespace xtrain {
namespace {

const char* const kContract[] = {
    env::kRank,       env::kWorldSize,    env::kLocalRank,    env::kLocalWorldSize, env::kGroupRank,
    env::kMasterAddr, env::kMasterPort,   env::kNcclId,       env::kRunId,          env::kRunDir,
    env::kJob,        env::kRestartCount, env::kMaxRestarts,  env::kResultFile,     env::kHeartbeatFile,
    env::kStoreEndpoint, env::kJobToken,  env::kNodeAddr,
    env::kGroupWorldSize, env::kRoleRank, env::kRoleWorldSize, env::kRoleName, env::kElasticRestartCount,
    env::kElasticMaxRestarts, env::kElasticRunId, env::kElasticErrorFile, env::kElasticUseAgentStore,
};

std::string getenv_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

int getenv_int(const char* name, int fallback, int min) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (*v == '\0' || *end != '\0' || errno != 0 || x < min || x > 1 << 30) {
    throw std::invalid_argument(std::string(name) + ": expected an integer >= " + std::to_string(min) +
                                ", got \"" + v + "\"");
  }
  return static_cast<int>(x);
}

}  // namespace

bool is_contract_variable(const std::string& name) {
  return std::any_of(std::begin(kContract), std::end(kContract), [&](const char* c) { return name == c; });
}

std::string result_file_path(const std::string& run_dir, int rank) {
  return run_dir + "/ranks/rank-" + std::to_string(rank) + ".json";
}

std::string heartbeat_file_path(const std::string& run_dir, int rank) {
  return run_dir + "/ranks/rank-" + std::to_string(rank) + ".heartbeat";
}

std::string backtrace_file_path(const std::string& run_dir, int rank) {
  return run_dir + "/ranks/rank-" + std::to_string(rank) + ".backtrace";
}

std::string elastic_error_file_path(const std::string& run_dir, int rank) {
  return run_dir + "/ranks/rank-" + std::to_string(rank) + ".error.json";
}

std::map<std::string, std::string> build_worker_env(const JobSpec& spec, const RankPlacement& where,
                                                    const AttemptEnv& attempt,
                                                    std::map<std::string, std::string> e, unsigned cores) {
  // A stale value from an enclosing launcher must not leak into this job.
  for (const char* name : kContract) e.erase(name);
  e[env::kRank] = std::to_string(where.rank);
  e[env::kWorldSize] = std::to_string(where.world_size);
  e[env::kLocalRank] = std::to_string(where.local_rank);
  e[env::kLocalWorldSize] = std::to_string(where.local_world_size);
  e[env::kGroupRank] = std::to_string(where.node_rank);
  e[env::kGroupWorldSize] = std::to_string(where.nnodes);
  e[env::kRoleRank] = e[env::kRank];  // one role: its ranks are the world's
  e[env::kRoleWorldSize] = e[env::kWorldSize];
  e[env::kRoleName] = attempt.role_name;
  e[env::kMasterAddr] = attempt.master_addr;
  e[env::kMasterPort] = std::to_string(attempt.master_port);
  if (!attempt.nccl_id_hex.empty()) e[env::kNcclId] = attempt.nccl_id_hex;
  e[env::kRunId] = attempt.run_id;
  e[env::kRunDir] = attempt.run_dir;
  e[env::kJob] = attempt.job_path;
  e[env::kRestartCount] = std::to_string(attempt.restart_count);
  e[env::kMaxRestarts] = std::to_string(attempt.max_restarts);
  e[env::kElasticRestartCount] = e[env::kRestartCount];
  e[env::kElasticMaxRestarts] = e[env::kMaxRestarts];
  e[env::kElasticRunId] = attempt.elastic_run_id;
  e[env::kElasticErrorFile] = elastic_error_file_path(attempt.run_dir, where.rank);
  e[env::kElasticUseAgentStore] = "False";
  e.emplace(env::kTorchNcclAsyncErrorHandling, "1");  // the environment's own value wins
  e[env::kResultFile] = result_file_path(attempt.run_dir, where.rank);
  e[env::kHeartbeatFile] = heartbeat_file_path(attempt.run_dir, where.rank);
  if (!attempt.store_endpoint.empty()) {
    e[env::kStoreEndpoint] = attempt.store_endpoint;
    e[env::kJobToken] = attempt.job_token;
    e[env::kNodeAddr] = attempt.node_addr;
  }
  if (!e.count(env::kOmpNumThreads) && !spec.worker.env.count(env::kOmpNumThreads)) {
    const unsigned share = cores / static_cast<unsigned>(std::max(1, where.local_world_size));
    e[env::kOmpNumThreads] = std::to_string(std::max(1u, share));
  }
  for (const auto& [name, value] : spec.worker.env) e[name] = value;
  return e;
}

WorkerEnv read_worker_env() {
  WorkerEnv w;
  w.where.world_size = getenv_int(env::kWorldSize, 1, 1);
  w.where.rank = getenv_int(env::kRank, 0, 0);
  if (w.where.rank >= w.where.world_size) {
    throw std::invalid_argument("RANK: expected an integer < WORLD_SIZE (" +
                                std::to_string(w.where.world_size) + "), got " +
                                std::to_string(w.where.rank));
  }
  w.where.local_world_size = getenv_int(env::kLocalWorldSize, w.where.world_size, 1);
  w.where.local_rank = getenv_int(env::kLocalRank, w.where.rank % w.where.local_world_size, 0);
  w.where.node_rank = getenv_int(env::kGroupRank, 0, 0);
  w.master_addr = getenv_or(env::kMasterAddr, w.master_addr);
  w.master_port = getenv_int(env::kMasterPort, 0, 0);
  w.nccl_id_hex = getenv_or(env::kNcclId, "");
  w.run_id = getenv_or(env::kRunId, w.run_id);
  w.run_dir = getenv_or(env::kRunDir, "");
  w.job_path = getenv_or(env::kJob, "");
  w.restart_count = getenv_int(env::kRestartCount, 0, 0);
  w.result_file = getenv_or(env::kResultFile, "");
  w.heartbeat_file = getenv_or(env::kHeartbeatFile, "");
  w.store_endpoint = getenv_or(env::kStoreEndpoint, "");
  w.job_token = getenv_or(env::kJobToken, "");
  w.node_addr = getenv_or(env::kNodeAddr, "");
  return w;
}

}  // namespace xtrain
