// SLURM's host lists expanded the way SLURM does, the step's geometry read from its variables
// with errors that name the variable, the derived rendezvous port and the job token.
#include <catch2/catch.hpp>

#include "common/slurm.hpp"

using xtrain::EnvMap;
using xtrain::expand_hostlist;
using xtrain::read_slurm_step;
using xtrain::resolve_job_token;
using xtrain::SlurmError;
using Hosts = std::vector<std::string>;

TEST_CASE("slurm: host lists expand as SLURM does", "[slurm]") {
  CHECK(expand_hostlist("node[01-03,07],gpu-a[1-2],login") ==
        Hosts{"node01", "node02", "node03", "node07", "gpu-a1", "gpu-a2", "login"});
  CHECK(expand_hostlist("login") == Hosts{"login"});
  CHECK(expand_hostlist("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("n[7]") == Hosts{"n7"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});         // no padding
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});  // padding kept
  CHECK(expand_hostlist("n[1,3,5-6]") == Hosts{"n1", "n3", "n5", "n6"});
  CHECK(expand_hostlist("[1-2]") == Hosts{"1", "2"});
  CHECK(expand_hostlist("node[1-2]-ib") == Hosts{"node1-ib", "node2-ib"});
  // Several bracket groups in one name: the cartesian product, the last group fastest.
  CHECK(expand_hostlist("rack[1-2]-n[08-09]") ==
        Hosts{"rack1-n08", "rack1-n09", "rack2-n08", "rack2-n09"});
  CHECK(expand_hostlist("a[1-2]b[3,5]c,z") == Hosts{"a1b3c", "a1b5c", "a2b3c", "a2b5c", "z"});
  CHECK(expand_hostlist("10.77.0.[1-2]") == Hosts{"10.77.0.1", "10.77.0.2"});
  CHECK(expand_hostlist("n[0-65535]").size() == 65536);
}

TEST_CASE("slurm: malformed host lists are named with the position", "[slurm]") {
  const auto error_for = [](const std::string& list) {
    try {
      expand_hostlist(list, 1000);
    } catch (const SlurmError& e) {
      return std::string(e.what());
    }
    FAIL("no error for \"" << list << "\"");
    return std::string();
  };
  CHECK(error_for("node[01-03") == "host list \"node[01-03\": the '[' is never closed (at position 4)");
  CHECK(error_for("node01-03]") == "host list \"node01-03]\": ']' without a '[' (at position 9)");
  CHECK_THAT(error_for("n[1,[2]]"), Catch::Contains("'[' inside the brackets opened at position 1"));
  CHECK_THAT(error_for("n[]"), Catch::Contains("empty brackets"));
  CHECK_THAT(error_for("n[3-1]"), Catch::Contains("range \"3-1\" runs backwards"));
  CHECK_THAT(error_for("n[a-b]"), Catch::Contains("expected a number or a range like 01-03 in the brackets, got \"a\""));
  CHECK_THAT(error_for("n[1-]"), Catch::Contains("got \"\""));
  CHECK_THAT(error_for("n[1,]"), Catch::Contains("empty range"));
  CHECK_THAT(error_for("n[1--2]"), Catch::Contains("got \"-2\""));
  CHECK_THAT(error_for("a,,b"), Catch::Contains("empty host name (at position 2)"));
  CHECK_THAT(error_for("a,"), Catch::Contains("empty host name"));
  CHECK_THAT(error_for(""), Catch::Contains("the list is empty"));
  CHECK_THAT(error_for("n[1-1001]"), Catch::Contains("more than 1000 hosts"));
  CHECK_THAT(error_for("a[1-40]b[1-40]"), Catch::Contains("more than 1000 hosts"));
  CHECK_THAT(error_for("n[1-999999999999999999]"), Catch::Contains("more than 1000 hosts"));
  CHECK_THAT(error_for("n[1-9999999999999999999]"), Catch::Contains("expected a number"));
}

namespace {

EnvMap step_env() {
  return {{"SLURM_JOB_ID", "123456"},       {"SLURM_STEP_ID", "0"},
          {"SLURM_JOB_NODELIST", "node[01-03]"}, {"SLURM_STEP_NODELIST", "node[02-03]"},
          {"SLURM_NNODES", "3"},            {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NUM_TASKS", "2"},    {"SLURM_NODEID", "1"}};
}

}  // namespace

TEST_CASE("slurm: a step's nodes, rank and rendezvous endpoint", "[slurm]") {
  CHECK_FALSE(read_slurm_step({{"HOME", "/root"}}).has_value());

  const auto step = read_slurm_step(step_env());
  REQUIRE(step);
  CHECK(step->job_id == 123456);
  CHECK(step->hosts == Hosts{"node02", "node03"});  // the step's list wins over the job's
  CHECK(step->nnodes == 2);
  CHECK(step->node_rank == 1);
  CHECK(step->rdzv_endpoint == "node02:23456");
  const auto nodes = step->nodes(42.0);
  CHECK(nodes.nnodes == 2);
  CHECK(nodes.node_rank == 1);
  CHECK(nodes.rdzv_endpoint == "node02:23456");
  CHECK(nodes.rdzv_timeout_s == 42.0);

  // A batch script on a one-node allocation (no step) is fine.
  const auto batch = read_slurm_step({{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "c1"},
                                      {"SLURM_JOB_NUM_NODES", "1"}, {"SLURM_NODEID", "0"}});
  REQUIRE(batch);
  CHECK(batch->nnodes == 1);
  CHECK(batch->rdzv_endpoint == "c1:20007");
}

TEST_CASE("slurm: the rendezvous port range", "[slurm]") {
  CHECK(xtrain::slurm_rdzv_port(0) == 20000);
  CHECK(xtrain::slurm_rdzv_port(9999) == 29999);
  CHECK(xtrain::slurm_rdzv_port(10000) == 20000);
  CHECK(xtrain::slurm_rdzv_port(18446744073709551615ull) == 20000 + 1615);
}

TEST_CASE("slurm: inconsistent variables are named", "[slurm]") {
  const auto error_for = [](EnvMap env) {
    try {
      read_slurm_step(env);
    } catch (const SlurmError& e) {
      return std::string(e.what());
    }
    FAIL("no error");
    return std::string();
  };
  auto env = step_env();
  env["SLURM_JOB_ID"] = "12x";
  CHECK(error_for(env) == "SLURM_JOB_ID: expected a non-negative integer, got \"12x\"");

  env = step_env();
  env["SLURM_STEP_NUM_NODES"] = "3";
  CHECK(error_for(env) == "SLURM_STEP_NUM_NODES=3 but SLURM_STEP_NODELIST=\"node[02-03]\" names 2 hosts");

  env = step_env();
  env["SLURM_STEP_NODELIST"] = "node[02-03";
  CHECK_THAT(error_for(env), Catch::StartsWith("SLURM_STEP_NODELIST: host list \"node[02-03\": the '[' is never closed"));

  env = step_env();
  env["SLURM_NODEID"] = "2";
  CHECK(error_for(env) == "SLURM_NODEID=2 but the step has only 2 nodes");
  env.erase("SLURM_NODEID");
  CHECK(error_for(env) == "SLURM_NODEID is not set in a 2-node step");

  env = step_env();
  env["SLURM_STEP_NUM_TASKS"] = "8";
  CHECK_THAT(error_for(env), Catch::Contains("srun started 8 tasks on 2 nodes") &&
                                 Catch::Contains("srun --ntasks-per-node=1"));

  env = step_env();
  env.erase("SLURM_STEP_ID");
  env.erase("SLURM_STEP_NODELIST");
  env.erase("SLURM_STEP_NUM_NODES");
  CHECK_THAT(error_for(env), Catch::Contains("batch script of a 3-node allocation") &&
                                 Catch::Contains("srun --ntasks-per-node=1 xlaunch"));

  CHECK(error_for({{"SLURM_JOB_ID", "5"}}) ==
        "SLURM_JOB_ID is set but SLURM_JOB_NODELIST (and SLURM_STEP_NODELIST) is not");
}

TEST_CASE("slurm: job token resolution", "[slurm]") {
  CHECK_FALSE(resolve_job_token({}, 1000).has_value());
  CHECK(resolve_job_token({{"XTRAIN_JOB_TOKEN", "s3cret"}, {"SLURM_JOB_ID", "1"}}, 1000) == "s3cret");
  CHECK(resolve_job_token({{"XTRAIN_JOB_TOKEN", ""}}, 1000) == std::nullopt);  // empty = unset
  CHECK(resolve_job_token({{"SLURM_JOB_ID", "123"}}, 1000) == "slurm-job-123-uid-1000");
  CHECK(resolve_job_token({{"SLURM_JOB_ID", "123"}, {"SLURM_JOB_UID", "42"}}, 1000) == "slurm-job-123-uid-42");
  // Different jobs, or the same job id under different users, get different tokens.
  CHECK(xtrain::slurm_job_token(123, 1000) != xtrain::slurm_job_token(124, 1000));
  CHECK(xtrain::slurm_job_token(123, 1000) != xtrain::slurm_job_token(123, 1001));
  CHECK_THROWS_AS(resolve_job_token({{"SLURM_JOB_ID", "abc"}}, 1000), SlurmError);
}
