// The rank environment of a job on several nodes: the store's address, the token and the node's
// address reach every rank, leave single-node jobs alone, and cannot be overridden.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "common/job_spec.hpp"
#include "common/worker_env.hpp"

using namespace xtrain;

TEST_CASE("multinode env: the store's variables reach the ranks only on several nodes", "[env]") {
  const JobSpec spec = parse_job_spec(nlohmann::json::object());
  AttemptEnv attempt;
  attempt.run_id = "job-1";
  const RankPlacement where{3, 1, 4, 2, 1};
  const std::map<std::string, std::string> inherited = {{"XTRAIN_JOB_TOKEN", "from the shell"},
                                                        {"XTRAIN_STORE_ENDPOINT", "stale:1"}};
  const auto single = build_worker_env(spec, where, attempt, inherited, 2);
  CHECK_FALSE(single.count("XTRAIN_JOB_TOKEN"));  // a launcher's secret does not leak into ranks
  CHECK_FALSE(single.count("XTRAIN_STORE_ENDPOINT"));
  CHECK_FALSE(single.count("XTRAIN_NODE_ADDR"));

  attempt.store_endpoint = "10.77.0.1:29400";
  attempt.job_token = "secret";
  attempt.node_addr = "10.77.0.2";
  const auto several = build_worker_env(spec, where, attempt, inherited, 2);
  CHECK(several.at("XTRAIN_STORE_ENDPOINT") == "10.77.0.1:29400");
  CHECK(several.at("XTRAIN_JOB_TOKEN") == "secret");
  CHECK(several.at("XTRAIN_NODE_ADDR") == "10.77.0.2");
  CHECK(several.at("GROUP_RANK") == "1");

  for (const char* name : {"XTRAIN_STORE_ENDPOINT", "XTRAIN_JOB_TOKEN", "XTRAIN_NODE_ADDR"}) {
    CHECK(is_contract_variable(name));
    CHECK_THROWS_AS(parse_job_spec(nlohmann::json{{"worker", {{"env", {{name, "x"}}}}}}), SpecError);
  }
}

TEST_CASE("multinode env: a worker reads the store's variables back", "[env]") {
  ::setenv("XTRAIN_STORE_ENDPOINT", "10.77.0.1:29400", 1);
  ::setenv("XTRAIN_JOB_TOKEN", "secret", 1);
  ::setenv("XTRAIN_NODE_ADDR", "10.77.0.2", 1);
  const WorkerEnv w = read_worker_env();
  ::unsetenv("XTRAIN_STORE_ENDPOINT");
  ::unsetenv("XTRAIN_JOB_TOKEN");
  ::unsetenv("XTRAIN_NODE_ADDR");
  CHECK(w.store_endpoint == "10.77.0.1:29400");
  CHECK(w.job_token == "secret");
  CHECK(w.node_addr == "10.77.0.2");
}
