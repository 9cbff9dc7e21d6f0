// Integration: torchrun's command line on the real xlaunch: a program as every rank, .py through
// PYTHON_EXEC, notes for ignored flags, and bad command lines (exit 2, one line naming the flag).
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>

#include <sys/stat.h>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;
namespace fs = std::filesystem;

TEST_CASE("launcher/torchrun-cli: a program after -- runs as every rank with torchrun's variables",
          "[integration][torchrun]") {
  TempDir dir;
  const auto r = run_xlaunch({"--nproc_per_node=2", "--max-restarts", "1", "--run-dir", dir / "run", "--",
                              bin_path("xtrain-test-worker"), "--print-env", "--fail-until-restart", "1"});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary["status"] == "succeeded");
  CHECK(summary["attempts"] == 2);
  CHECK(summary["world_size"] == 2);
  for (int rank = 0; rank < 2; ++rank) {
    const auto env = printed_env(read_file(dir / ("run/logs/rank-" + std::to_string(rank) + ".log")));
    CHECK(env.at("RANK") == std::to_string(rank));
    CHECK(env.at("LOCAL_RANK") == std::to_string(rank));
    CHECK(env.at("WORLD_SIZE") == "2");
    CHECK(env.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(std::stoi(env.at("MASTER_PORT")) > 0);
    // torch.distributed.elastic's, from the second attempt (the first failed on purpose).
    CHECK(env.at("GROUP_RANK") == "0");
    CHECK(env.at("GROUP_WORLD_SIZE") == "1");
    CHECK(env.at("ROLE_RANK") == std::to_string(rank));
    CHECK(env.at("ROLE_WORLD_SIZE") == "2");
    CHECK(env.at("ROLE_NAME") == "default");
    CHECK(env.at("TORCHELASTIC_RESTART_COUNT") == "1");
    CHECK(env.at("TORCHELASTIC_MAX_RESTARTS") == "1");
    CHECK(env.at("TORCHELASTIC_RUN_ID") == summary["run_id"]);
  }
  const auto job = read_json(dir / "run/job.json");
  CHECK(job["name"] == "xtrain-test-worker");
  CHECK(job["worker"]["command"][0] == bin_path("xtrain-test-worker"));
}

TEST_CASE("launcher/torchrun-cli: a .py program runs as $PYTHON_EXEC -u SCRIPT ARGS", "[integration][torchrun]") {
  TempDir dir;
  const std::string python = write_file(dir / "python", "#!/bin/sh\necho \"python argv: $*\"\n");
  ::chmod(python.c_str(), 0755);
  const std::string script = write_file(dir / "train.py", "print('never run by the fake python')\n");
  const auto env = environment_with({{"PYTHON_EXEC", python}});
  const auto r = run_xlaunch({"--run-dir", dir / "run", "--standalone", script, "--epochs", "3"}, 30, &env);
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(read_file(dir / "run/logs/rank-0.log"), Contains("python argv: -u " + script + " --epochs 3\n"));
  CHECK_THAT(r->out, Contains("[rank 0] python argv: -u " + script));
  const auto module = run_xlaunch({"--run-dir", dir / "mod", "-m", "pkg.train", "x"}, 30, &env);
  REQUIRE(module);
  CHECK_THAT(read_file(dir / "mod/logs/rank-0.log"), Contains("python argv: -u -m pkg.train x\n"));
}

TEST_CASE("launcher/torchrun-cli: a .py rank without a module says which python ran it and what chooses it",
          "[integration][torchrun]") {
  TempDir dir;
  const std::string python = write_file(
      dir / "python", "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n");
  ::chmod(python.c_str(), 0755);
  const std::string script = write_file(dir / "train.py", "import torch\n");
  const auto env = environment_with({{"PYTHON_EXEC", python}});
  const auto r = run_xlaunch({"--run-dir", dir / "run", "--standalone", script}, 30, &env);
  REQUIRE(r);
  CHECK(r->exit_code == 1);
  CHECK_THAT(r->err, Contains("rank 0 ran " + script + " with " + python +
                              ", which lacks a module it imports; PYTHON_EXEC chooses the interpreter "
                              "(else python3 from PATH)"));
}

// PyTorch's own @record writes the exception where TORCHELASTIC_ERROR_FILE says, as under torchrun;
// a script without it leaves the message to its traceback's last line.
TEST_CASE("launcher/torchrun-cli: a PyTorch script's exception is the root cause's message, from @record's error "
          "file or its traceback", "[integration][torchrun][torch]") {
  TempDir dir;
  const std::string body =
      "import os\n"
      "from torch.distributed.elastic.multiprocessing.errors import record\n"
      "def main():\n"
      "    if os.environ['RANK'] == '1':\n"
      "        try:\n"
      "            {}['shape']\n"
      "        except KeyError:\n"
      "            raise ValueError('batch shape (8, 1023), expected (8, 1024)')\n";
  const std::string recorded = write_file(dir / "recorded.py", body + "record(main)()\n");
  const std::string plain = write_file(dir / "plain.py", body + "main()\n");
  // A traceback it handled, then a death by a signal: no message from the traceback.
  const std::string killed = write_file(dir / "killed.py", body + "import os, signal\n"
                                        "try:\n    main()\nexcept ValueError:\n"
                                        "    import traceback; traceback.print_exc()\n"
                                        "    os.kill(os.getpid(), signal.SIGKILL)\n");
  const auto env = environment_with({{"PYTHON_EXEC", "/usr/bin/python3"}});
  const std::string message = "ValueError: batch shape (8, 1023), expected (8, 1024)";
  for (const std::string& script : {recorded, plain, killed}) {
    INFO(script);
    const std::string run = dir / fs::path(script).stem().string();
    const auto r = run_xlaunch({"--nproc-per-node", "2", "--run-dir", run, script}, 60, &env);
    REQUIRE(r);
    if (script == killed) {
      CHECK(r->exit_code == 128 + SIGKILL);
      CHECK(read_json(run + "/summary.json")["root_cause"]["message"].is_null());
      continue;
    }
    CHECK(r->exit_code == 1);
    CHECK_THAT(r->err, Contains("rank 1 (pid ") && Contains("failed: exit code 1 at ") &&
                           Contains("; message: " + message + "; last lines:"));
    const auto summary = read_json(run + "/summary.json");
    CHECK(summary["root_cause"]["message"] == message);
    const auto result = summary["ranks"][1]["result"];
    if (script == recorded) {
      CHECK(result["error"] == message);
      CHECK(result["error_file"] == run + "/ranks/rank-1.error.json");
      CHECK_THAT(result["traceback"].get<std::string>(),
                 Contains("KeyError: 'shape'") && Contains("raise ValueError(") && Contains(message));
    } else {
      CHECK(result.is_null());
    }
  }
}

TEST_CASE("launcher/torchrun-cli: flags that do nothing here say so on stderr", "[integration][torchrun]") {
  TempDir dir;
  const auto r = run_xlaunch({"--monitor-interval", "5", "--log-line-prefix-template", "[${role_name}${rank}]:",
                              "--redirects", "3", "--tee", "0:3", "--run-dir", dir / "run",
                              "--nproc-per-node", "2", "--no-python", bin_path("xtrain-test-worker"), "--print", "hi"});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(r->err, Contains("xlaunch: note: --monitor-interval is ignored: xlaunch reacts to each rank's exit"));
  CHECK_THAT(r->err, Contains("xlaunch: note: --log-line-prefix-template is ignored: xlaunch's console prefixes each "
                              "rank's lines with [rank R]"));
  CHECK_THAT(r->out, Contains("[rank 0] hi"));  // --redirects 3 --tee 0:3: rank 0 only
  CHECK_THAT(r->out, !Contains("[rank 1]"));
  CHECK_THAT(read_file(dir / "run/logs/rank-1.log"), Contains("hi"));
}

TEST_CASE("launcher/torchrun-cli: bad command lines exit 2 with one line naming the flag and start nothing",
          "[integration][torchrun]") {
  TempDir dir;
  const std::string worker = bin_path("xtrain-test-worker");
  const std::string two_nodes = write_spec(
      dir, {{"worker", {{"command", {worker}}}}, {"nodes", {{"nnodes", 2}, {"rdzv_endpoint", "127.0.0.1:1"}}}},
      "two_nodes.json");
  const std::string run = dir / "run";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--frobnicate", "--", worker}, "unknown option --frobnicate"},
      {{"--run-dir", run, "--"}, "--: expected PROGRAM [ARGS...] after it"},
      {{"--nproc-per-node", "lots", worker}, "--nproc-per-node: expected a number >= 1, auto, gpu or cpu"},
      {{"--max_restarts=x", worker}, "--max_restarts: expected an integer >= 0"},
      {{"--nnodes", "1:4", worker}, "--nnodes 1:4: elastic ranges (MIN:MAX) are not supported"},
      {{"--run-dir", run, "--nnodes", "2", worker}, "--nnodes 2: a job on 2 nodes needs node 0's address"},
      {{"--run-dir", run, two_nodes, "--node-rank", "3"}, "--node-rank 3: expected an integer < nodes.nnodes (2)"},
      {{"--standalone", "--nnodes", "2", worker}, "--standalone runs on one node; it excludes --nnodes 2"},
      {{"--rdzv-backend", "etcd-v2", worker}, "--rdzv-backend etcd-v2: not supported"},
      {{"--rdzv-conf", "timeout=5", worker}, "--rdzv-conf: \"timeout=5\" is not supported"},
      {{"--local-addr", "10.0.0.1", worker}, "torchrun's --local-addr is not supported by xlaunch"},
      {{"--tee", "rank0", "--redirects", "3", worker}, "--tee rank0 and --redirects exclude each other"},
      {{"-m"}, "-m: expected the program after the options"},
  };
  for (const auto& [args, message] : cases) {
    INFO("xlaunch " << [&] {
      std::string line;
      for (const auto& a : args) line += a + " ";
      return line;
    }());
    const auto r = run_xlaunch(args);
    REQUIRE(r);
    CHECK(r->exit_code == 2);
    CHECK(split_lines(r->err).size() == 1);
    CHECK_THAT(r->err, StartsWith("xlaunch: error: "));
    CHECK_THAT(r->err, Contains(message));
    CHECK(r->out.empty());
    CHECK_FALSE(exists(run));
  }
}
