#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "common/exit_codes.hpp"
#include "common/worker_env.hpp"

using namespace xtrain;

namespace {

AttemptEnv sample_attempt() {
  AttemptEnv a;
  a.master_port = 29501;
  a.run_id = "job-1";
  a.elastic_run_id = "job";
  a.run_dir = "/runs/job";
  a.job_path = "/runs/job/job.json";
  a.restart_count = 1;
  a.max_restarts = 3;
  return a;
}

}  // namespace

TEST_CASE("the env builder sets exactly the contract's variables", "[env]") {
  JobSpec spec = parse_job_spec(nlohmann::json::parse(R"({"worker": {"env": {"EXTRA": "1"}}})"));
  RankPlacement where{5, 1, 8, 4, 1, 2};
  AttemptEnv attempt = sample_attempt();
  attempt.nccl_id_hex = std::string(256, 'a');
  const auto e = build_worker_env(spec, where, attempt,
                                  {{"PATH", "/bin"}, {"RANK", "stale"}, {"TORCHELASTIC_RUN_ID", "stale"}}, 16);
  const std::map<std::string, std::string> expected = {
      {"PATH", "/bin"},
      {"RANK", "5"},
      {"WORLD_SIZE", "8"},
      {"LOCAL_RANK", "1"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"},
      {"GROUP_WORLD_SIZE", "2"},
      {"ROLE_RANK", "5"},
      {"ROLE_WORLD_SIZE", "8"},
      {"ROLE_NAME", "default"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job"},
      {"TORCHELASTIC_ERROR_FILE", "/runs/job/ranks/rank-5.error.json"},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "29501"},
      {"XTRAIN_NCCL_ID", std::string(256, 'a')},
      {"XTRAIN_RUN_ID", "job-1"},
      {"XTRAIN_RUN_DIR", "/runs/job"},
      {"XTRAIN_JOB", "/runs/job/job.json"},
      {"XTRAIN_RESTART_COUNT", "1"},
      {"XTRAIN_MAX_RESTARTS", "3"},
      {"XTRAIN_RESULT_FILE", "/runs/job/ranks/rank-5.json"},
      {"XTRAIN_HEARTBEAT_FILE", "/runs/job/ranks/rank-5.heartbeat"},
      {"OMP_NUM_THREADS", "4"},
      {"EXTRA", "1"},
  };
  CHECK(e == expected);
}

TEST_CASE("optional variables appear only when they apply", "[env]") {
  const JobSpec spec = parse_job_spec(nlohmann::json::object());
  const auto e = build_worker_env(spec, {0, 0, 3, 3, 0}, sample_attempt(), {{"OMP_NUM_THREADS", "7"}}, 2);
  CHECK_FALSE(e.count("XTRAIN_NCCL_ID"));
  CHECK(e.at("XTRAIN_HEARTBEAT_FILE") == "/runs/job/ranks/rank-0.heartbeat");  // always: the progress record
  CHECK(e.at("OMP_NUM_THREADS") == "7");  // the user's choice passes through
  const auto fewer_cores = build_worker_env(spec, {0, 0, 3, 3, 0}, sample_attempt(), {}, 2);
  CHECK(fewer_cores.at("OMP_NUM_THREADS") == "1");  // 2 cores / 3 ranks, at least 1
}

TEST_CASE("a worker reads its place back from the environment", "[env]") {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "4", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  ::setenv("LOCAL_WORLD_SIZE", "2", 1);
  ::setenv("MASTER_PORT", "1234", 1);
  WorkerEnv w = read_worker_env();
  CHECK(w.where.rank == 2);
  CHECK(w.where.world_size == 4);
  CHECK(w.where.local_rank == 0);
  CHECK(w.master_port == 1234);

  ::setenv("RANK", "4", 1);
  CHECK_THROWS_WITH(read_worker_env(), "RANK: expected an integer < WORLD_SIZE (4), got 4");
  ::setenv("RANK", "two", 1);
  CHECK_THROWS_WITH(read_worker_env(), "RANK: expected an integer >= 0, got \"two\"");
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"}) ::unsetenv(v);
  w = read_worker_env();
  CHECK(w.where.rank == 0);
  CHECK(w.where.world_size == 1);
}

TEST_CASE("exit codes map outcomes the way a shell does", "[exit]") {
  CHECK(exit_code::from_outcome(3, 0) == 3);
  CHECK(exit_code::from_outcome(0, 9) == 137);
  CHECK(exit_code::from_outcome(0, 15) == 143);
  CHECK(exit_code::signal_name(15) == "SIGTERM");
  CHECK(exit_code::signal_name(99) == "signal 99");
  CHECK(exit_code::killed_by(11) == "killed by signal 11 (SIGSEGV)");
  CHECK(exit_code::killed_by(99) == "killed by signal 99");
}
