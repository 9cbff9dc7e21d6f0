// Integration: exit codes, the root cause, the environment, --tee.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include <sched.h>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("launcher/run: every rank exits 0 so xlaunch exits 0 and records the run", "[integration]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 3, {"--print", "hello"}));
  CHECK(r.run.exit_code == 0);
  CHECK(r.summary["status"] == "succeeded");
  CHECK(r.summary["exit_code"] == 0);
  CHECK(r.summary["root_cause"].is_null());
  CHECK(r.summary["attempts"] == 1);
  REQUIRE(r.summary["ranks"].size() == 3);
  for (const auto& rank : r.summary["ranks"]) {
    CHECK(rank["status"] == "succeeded");
    CHECK(rank["exit_code"] == 0);
    CHECK(rank["pid"].get<int>() > 0);
  }
  CHECK(read_json(dir / "run/state.json")["status"] == "finished");
  CHECK(read_json(dir / "run/job.json")["nproc_per_node"] == 3);
  for (int rank = 0; rank < 3; ++rank) {
    const auto lines = split_lines(read_file(dir / ("run/logs/rank-" + std::to_string(rank) + ".log")));
    REQUIRE(lines.size() == 2);
    CHECK_THAT(lines[0], StartsWith("==== xlaunch: attempt 1 of 1 at "));
    CHECK(lines[1] == "hello");
    CHECK_THAT(r.run.out, Contains("[rank " + std::to_string(rank) + "] hello\n"));
  }
  CHECK_THAT(r.run.err, Contains("[xlaunch] job succeeded"));
  CHECK_THAT(read_file(dir / "run/logs/xlaunch.log"), Contains("[xlaunch] info: job succeeded"));
}

TEST_CASE("launcher/run: a rank's exit code is xlaunch's with an actionable root cause", "[integration]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 4, {"--hang", "--rank", "1", "--print", "step 1 ok", "--stderr",
                                                 "fatal: disk on fire", "--result-error", "disk on fire", "--sleep",
                                                 "0.2", "--exit", "3"}));
  CHECK(r.run.exit_code == 3);
  CHECK(r.summary["status"] == "failed");
  CHECK(r.summary["exit_code"] == 3);
  const auto& cause = r.summary["root_cause"];
  CHECK(cause["rank"] == 1);
  CHECK(cause["exit_code"] == 3);
  CHECK(cause["signal"].is_null());
  CHECK(cause["message"] == "disk on fire");
  CHECK(cause["log_tail"] == nlohmann::json::array({"step 1 ok", "fatal: disk on fire"}));
  CHECK(cause["pid"] == r.summary["ranks"][1]["pid"]);
  CHECK(r.summary["ranks"][1]["result"]["error"] == "disk on fire");
  for (int other : {0, 2, 3}) {
    CHECK(r.summary["ranks"][other]["status"] == "stopped");
    CHECK(r.summary["ranks"][other]["signal"] == SIGTERM);
  }
  const std::string pid = std::to_string(cause["pid"].get<int>());
  CHECK_THAT(r.run.err, Contains("[xlaunch] rank 1 (pid " + pid + ") failed: exit code 3 at "));
  CHECK_THAT(r.run.err, Contains("; message: disk on fire; last lines:\n[xlaunch]   | step 1 ok\n"
                                 "[xlaunch]   | fatal: disk on fire\n"));
}

TEST_CASE("launcher/run: a rank killed by signal N makes xlaunch exit 128+N", "[integration]") {
  const int sig = GENERATE(SIGABRT, SIGSEGV, SIGKILL);
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 3, {"--hang", "--rank", "2", "--sleep", "0.1", "--signal",
                                                 std::to_string(sig)}));
  CHECK(r.run.exit_code == 128 + sig);
  const auto& cause = r.summary["root_cause"];
  CHECK(cause["rank"] == 2);
  CHECK(cause["signal"] == sig);
  CHECK(cause["exit_code"].is_null());
  CHECK_THAT(r.run.err, Contains("failed: killed by signal " + std::to_string(sig) + " (SIG"));
}

TEST_CASE("launcher/run: the root cause is the first rank to fail", "[integration]") {
  TempDir dir;
  auto spec = test_spec(dir, 4, {"--hang", "--rank", "0", "--ignore-term", "--sleep", "0.8", "--exit", "7",
                                 "--rank", "2", "--sleep", "0.2", "--exit", "5"});
  spec["launcher"]["term_timeout_s"] = 5;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 5);
  CHECK(r.summary["root_cause"]["rank"] == 2);
  CHECK(r.summary["ranks"][0]["exit_code"] == 7);  // failed later, during the teardown: not the cause
  CHECK(r.summary["ranks"][0]["status"] == "stopped");
}

TEST_CASE("launcher/run: each rank sees exactly the environment the contract lists", "[integration][env]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--print-env"});
  spec["worker"]["env"] = {{"EXTRA", "1"}};
  spec["launcher"]["heartbeat_timeout_s"] = 30;
  spec["launcher"]["max_restarts"] = 1;
  const std::map<std::string, std::string> parent = {
      {"PATH", "/usr/bin:/bin"}, {"HOME", dir.path()}, {"LANG", "C"}, {"PASS_THROUGH", "yes"},
      {"RANK", "99"}, {"MASTER_PORT", "1"}};  // stale values from an enclosing launcher
  REQUIRE(run_job(dir, spec, {}, 30, &parent).run.exit_code == 0);

  cpu_set_t cpus;
  sched_getaffinity(0, sizeof(cpus), &cpus);
  const int omp = std::max(1, CPU_COUNT(&cpus) / 2);
  const std::string run = dir / "run";
  const auto env0 = printed_env(read_file(run + "/logs/rank-0.log"));
  const std::string port = env0.count("MASTER_PORT") ? env0.at("MASTER_PORT") : "0";
  CHECK(std::stoi(port) > 1024);
  const std::string run_id = env0.count("XTRAIN_RUN_ID") ? env0.at("XTRAIN_RUN_ID") : "";
  CHECK_THAT(run_id, StartsWith("test-") && Catch::Matchers::EndsWith("-a1"));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string r = std::to_string(rank);
    const std::map<std::string, std::string> expected = {
        {"PATH", "/usr/bin:/bin"}, {"HOME", dir.path()}, {"LANG", "C"}, {"PASS_THROUGH", "yes"}, {"EXTRA", "1"},
        {"RANK", r}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", r}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "0"},
        {"GROUP_WORLD_SIZE", "1"}, {"ROLE_RANK", r}, {"ROLE_WORLD_SIZE", "2"}, {"ROLE_NAME", "default"},
        {"TORCHELASTIC_RESTART_COUNT", "0"}, {"TORCHELASTIC_MAX_RESTARTS", "1"},
        {"TORCHELASTIC_RUN_ID", run_id.substr(0, run_id.size() - 3)},  // without the attempt's "-a1"
        {"TORCHELASTIC_ERROR_FILE", run + "/ranks/rank-" + r + ".error.json"},
        {"TORCHELASTIC_USE_AGENT_STORE", "False"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
        {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", port}, {"XTRAIN_RUN_ID", run_id}, {"XTRAIN_RUN_DIR", run},
        {"XTRAIN_JOB", run + "/job.json"}, {"XTRAIN_RESTART_COUNT", "0"}, {"XTRAIN_MAX_RESTARTS", "1"},
        {"XTRAIN_RESULT_FILE", run + "/ranks/rank-" + r + ".json"},
        {"XTRAIN_HEARTBEAT_FILE", run + "/ranks/rank-" + r + ".heartbeat"},
        {"OMP_NUM_THREADS", std::to_string(omp)}};
    CHECK(printed_env(read_file(run + "/logs/rank-" + r + ".log")) == expected);
  }
  CHECK(read_json(run + "/job.json")["worker"]["env"]["EXTRA"] == "1");
}

TEST_CASE("launcher/run: a missing worker exits 127 and a non-executable one 126 starting nothing", "[integration]") {
  TempDir dir;
  write_file(dir / "script.sh", "#!/bin/sh\necho hi\n");  // not executable
  const std::pair<std::string, int> cases[] = {
      {dir / "no-such-worker", 127}, {"no-such-worker-in-path", 127}, {dir / "script.sh", 126}, {dir.path(), 126}};
  for (const auto& [command, code] : cases) {
    auto spec = test_spec(dir, 2, {});
    spec["worker"]["command"] = {command};
    const auto r = run_job(dir, spec);
    CHECK(r.run.exit_code == code);
    CHECK_THAT(r.run.err, StartsWith("xlaunch: error: worker.command[0]: "));
    CHECK_FALSE(exists(dir / "run"));
  }
}

TEST_CASE("launcher/run: a worker that passes the checks but cannot be executed exits 126 with the reason",
          "[integration]") {
  TempDir dir;
  const std::string garbage = write_file(dir / "garbage", "\x7f not a program\n");
  std::filesystem::permissions(garbage, std::filesystem::perms::owner_all);  // executable, but no format
  auto spec = test_spec(dir, 2, {});
  spec["worker"]["command"] = {garbage};
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 126);
  CHECK(r.summary["root_cause"]["exit_code"] == 126);
  CHECK(r.summary["root_cause"]["log_tail"] == nlohmann::json::array({"xlaunch: " + garbage + ": Exec format error"}));
}

TEST_CASE("launcher/run: --tee chooses which ranks reach the console while files get all", "[integration]") {
  const std::string tee = GENERATE("rank0", "none");
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 3, {"--print", "hi"}), {"--tee", tee});
  CHECK(r.run.exit_code == 0);
  CHECK((r.run.out.find("[rank 0] hi") != std::string::npos) == (tee == "rank0"));
  CHECK(r.run.out.find("[rank 1]") == std::string::npos);
  CHECK(r.run.out.find("[rank 2]") == std::string::npos);
  for (int rank = 0; rank < 3; ++rank) {
    CHECK_THAT(read_file(dir / ("run/logs/rank-" + std::to_string(rank) + ".log")), Contains("\nhi\n"));
  }
}

TEST_CASE("launcher/run: on GPUs every rank of an attempt gets the same fresh XTRAIN_NCCL_ID", "[integration][gpu]") {
  TempDir dir;
  auto spec = test_spec(dir, 1, {"--print-env", "--fail-until-restart", "1"});
  spec.erase("nproc_per_node");  // auto: one rank per visible GPU
  spec["device"] = "auto";
  spec["launcher"]["max_restarts"] = 1;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 0);
  CHECK(r.summary["device"] == "cuda");
  CHECK(r.summary["backend"] == "nccl");
  CHECK(r.summary["attempts"] == 2);
  std::vector<std::vector<std::string>> ids;  // per rank, per attempt
  for (const auto& rank : r.summary["ranks"]) {
    ids.emplace_back();
    for (const auto& line : split_lines(read_file(dir / ("run/logs/rank-" + rank["rank"].dump() + ".log")))) {
      if (line.rfind("ENV XTRAIN_NCCL_ID=", 0) == 0) ids.back().push_back(line.substr(19));
    }
    REQUIRE(ids.back().size() == 2);
    for (const auto& id : ids.back()) {
      CHECK(id.size() == 256);
      CHECK(id.find_first_not_of("0123456789abcdef") == std::string::npos);
    }
    CHECK(ids.back()[0] != ids.back()[1]);  // fresh per attempt
    CHECK(ids.back() == ids.front());       // the same on every rank
  }
}
