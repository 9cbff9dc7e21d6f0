#include <catch2/catch.hpp>

#include "common/job_spec.hpp"
#include "launcher/cli/cli.hpp"

#include <nlohmann/json.hpp>

using namespace xtrain::launcher;
using Catch::Matchers::Contains;

TEST_CASE("launcher/cli: a run with every option", "[cli]") {
  const CliOptions o = parse_cli({"--set", "launcher.max_restarts=2", "job.json", "--nproc-per-node", "auto",
                                  "--run-dir=123", "--tee", "rank0", "--set=name=x"});
  CHECK(o.command == Command::kRun);
  CHECK(o.job_path == "job.json");
  CHECK(o.overrides == std::vector<std::string>{"launcher.max_restarts=2", "nproc_per_node=\"auto\"",
                                                "run_dir=\"123\"", "launcher.tee=\"rank0\"", "name=x"});
  CHECK_FALSE(o.dry_run);
  CHECK_FALSE(o.detach);
}

TEST_CASE("launcher/cli: --run-dir and --tee stay strings whatever they look like", "[cli]") {
  nlohmann::json doc = nlohmann::json::object();
  for (const auto& assignment : parse_cli({"j.json", "--run-dir", "true", "--tee", "none"}).overrides) {
    xtrain::apply_override(doc, assignment);
  }
  CHECK(doc["run_dir"] == "true");
  CHECK(doc["launcher"]["tee"] == "none");
}

TEST_CASE("launcher/cli: modes", "[cli]") {
  CHECK(parse_cli({"j.json", "--dry-run"}).dry_run);
  CHECK(parse_cli({"--check", "j.json"}).check);
  CHECK(parse_cli({"j.json", "--detach"}).detach);
  CHECK(parse_cli({"--help"}).command == Command::kHelp);
  CHECK(parse_cli({"status", "x", "-h"}).command == Command::kHelp);
}

TEST_CASE("launcher/cli: subcommands", "[cli]") {
  const CliOptions status = parse_cli({"status", "runs/a", "--json"});
  CHECK(status.command == Command::kStatus);
  CHECK(status.run_dir == "runs/a");
  CHECK(status.json);

  const CliOptions logs = parse_cli({"logs", "--rank", "3", "runs/a", "-f"});
  CHECK(logs.command == Command::kLogs);
  CHECK(logs.rank == 3);
  CHECK(logs.follow);

  const CliOptions stop = parse_cli({"stop", "runs/a"});
  CHECK(stop.command == Command::kStop);
  CHECK(stop.run_dir == "runs/a");
}

TEST_CASE("launcher/cli: errors say what is wrong", "[cli]") {
  using Catch::Matchers::Contains;
  CHECK_THROWS_WITH(parse_cli({}), Contains("expected a job spec"));
  CHECK_THROWS_WITH(parse_cli({"status"}), Contains("expected a run directory: xlaunch status RUN_DIR"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "b.json"}), Contains("unexpected argument \"b.json\""));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--frobnicate"}),
                    Contains("unknown option --frobnicate (see xlaunch --help)"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--dryrun"}), Contains("unknown option --dryrun (did you mean --dry-run?)"));
  CHECK(subcommand_hint("stauts") == " (did you mean `xlaunch status`?)");
  CHECK_THROWS_WITH(parse_cli({"job.yaml"}), Contains("\"job.yaml\": job specs are JSON (JOB.json, comments allowed)"));
  CHECK(subcommand_hint("train.py").empty());
  CHECK_THROWS_WITH(parse_cli({"a.json", "--set"}), Contains("--set: expected a value"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--set", "novalue"}), Contains("--set: expected KEY=VALUE"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--tee", "some"}), Contains("--tee: expected all, rank0 or none"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--dry-run=yes"}), Contains("--dry-run: takes no value"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--dry-run", "--detach"}), Contains("exclude each other"));
  CHECK_THROWS_WITH(parse_cli({"a.json", "--json"}), Contains("--json is not an option of `xlaunch JOB.json`"));
  CHECK_THROWS_WITH(parse_cli({"logs", "d", "--rank", "-1"}), Contains("--rank: expected an integer >= 0"));
  CHECK_THROWS_WITH(parse_cli({"logs", "d", "--rank", "1x"}), Contains("--rank: expected an integer >= 0"));
  CHECK_THROWS_WITH(parse_cli({"stop", "d", "--follow"}), Contains("--follow is not an option of `xlaunch stop`"));
  CHECK_THROWS_AS(parse_cli({"status", "d", "--set", "a=1"}), CliError);
}

TEST_CASE("launcher/cli: torchrun's forms: a program after the options or after --", "[cli][torchrun]") {
  CliOptions o = parse_cli({"--nproc_per_node=2", "--standalone", "train.py", "--lr", "3", "--set", "x"});
  CHECK(o.job_path.empty());
  CHECK(o.program == std::vector<std::string>{"train.py", "--lr", "3", "--set", "x"});  // the script's own
  CHECK(o.program_kind == ProgramKind::kPythonScript);
  CHECK(o.rendezvous.standalone);
  CHECK(o.overrides == std::vector<std::string>{"nproc_per_node=2"});

  o = parse_cli({"job.json", "--max-restarts", "2", "--", "./worker", "--flag"});
  CHECK(o.job_path == "job.json");
  CHECK(o.program == std::vector<std::string>{"./worker", "--flag"});
  CHECK(o.program_kind == ProgramKind::kExecutable);
  CHECK(o.overrides == std::vector<std::string>{"launcher.max_restarts=2"});
  CHECK(o.flag_of.at("launcher.max_restarts") == "--max-restarts 2");

  o = parse_cli({"-m", "pkg.train", "a"});
  CHECK(o.program_kind == ProgramKind::kPythonModule);
  CHECK(o.program == std::vector<std::string>{"pkg.train", "a"});
  CHECK(parse_cli({"--no_python", "run.py"}).program_kind == ProgramKind::kExecutable);
  CHECK(parse_cli({"--run-path", "--no-python", "run.py"}).program_kind == ProgramKind::kPythonScript);
  CHECK(parse_cli({"--", "x.json"}).program == std::vector<std::string>{"x.json"});
  CHECK(parse_cli({"--no-python", "x.json"}).program == std::vector<std::string>{"x.json"});
}

TEST_CASE("launcher/cli: torchrun's flags in both spellings and both value forms", "[cli][torchrun]") {
  const CliOptions o = parse_cli({"--nnodes=2:2", "--node_rank", "1", "--rdzv-endpoint", "10.0.0.1", "--rdzv_backend=c10d",
                                  "--rdzv-id=job7", "--rdzv_conf", "join_timeout=90", "--max_restarts=1",
                                  "--master_addr", "h", "--master-port=2345", "--monitor_interval", "0.5",
                                  "--start-method", "fork", "--role", "trainer", "--log_dir", "/tmp/logs", "a.py"});
  CHECK(o.overrides == std::vector<std::string>{"nodes.nnodes=2", "nodes.node_rank=1",
                                                "nodes.rdzv_endpoint=\"10.0.0.1:29400\"", "nodes.rdzv_timeout_s=90.0",
                                                "launcher.max_restarts=1"});
  CHECK(o.rendezvous.nnodes == 2);
  CHECK(o.rendezvous.node_rank);
  CHECK(o.rendezvous.endpoint == "10.0.0.1:29400");
  CHECK(o.rendezvous.rdzv_id == "job7");
  CHECK(o.rendezvous.master_addr == "h");
  CHECK(o.rendezvous.master_port == 2345);
  CHECK(o.log_dir == "/tmp/logs");
  CHECK(o.flag_of.at("nodes.rdzv_endpoint") == "--rdzv-endpoint 10.0.0.1");
  CHECK(o.flag_of.at("run_dir") == "--log_dir /tmp/logs");
  CHECK(o.rendezvous.role == "trainer");
  REQUIRE(o.notes.size() == 2);
  CHECK_THAT(o.notes[0], Catch::Matchers::StartsWith("--monitor_interval is ignored"));
  CHECK_THAT(o.notes[1], Catch::Matchers::StartsWith("--start-method is ignored"));
}

TEST_CASE("launcher/cli: PET_* variables go before the command line's overrides", "[cli][torchrun]") {
  const CliOptions o = parse_cli({"--set", "nodes.nnodes=3", "--max-restarts", "2", "a.json"},
                                 {{"PET_NNODES", "2"}, {"PET_MAX_RESTARTS", "5"}, {"NNODES", "7"}, {"PET_OTHER", "x"}});
  // PET_MAX_RESTARTS is not read: its flag is on the command line; the others are not torchrun's.
  CHECK(o.overrides == std::vector<std::string>{"nodes.nnodes=2", "nodes.nnodes=3", "launcher.max_restarts=2"});
  CHECK(o.flag_of.at("nodes.nnodes") == "PET_NNODES 2");
  CHECK(o.rendezvous.nnodes == 2);
  // A subcommand reads no variable.
  CHECK(parse_cli({"status", "runs/x"}, {{"PET_NNODES", "two"}}).run_dir == "runs/x");
}

TEST_CASE("launcher/cli: --nproc-per-node takes a number or auto or gpu or cpu", "[cli][torchrun]") {
  CHECK(parse_cli({"--nproc-per-node", "3", "a.json"}).overrides == std::vector<std::string>{"nproc_per_node=3"});
  CHECK(parse_cli({"--nproc-per-node", "gpu", "a.json"}).overrides ==
        std::vector<std::string>{"nproc_per_node=\"auto\"", "device=\"cuda\""});
  const CliOptions cpu = parse_cli({"--nproc_per_node=cpu", "a.json"});
  CHECK(cpu.overrides == std::vector<std::string>{"nproc_per_node=\"auto\"", "device=\"cpu\""});
  CHECK(cpu.flag_of.at("device") == "--nproc_per_node cpu");
}

TEST_CASE("launcher/cli: torchrun's --redirects and --tee become launcher.tee", "[cli][torchrun]") {
  const auto tee = [](std::vector<std::string> args) {
    args.push_back("a.json");
    return parse_cli(args).overrides.back();
  };
  CHECK(tee({"--redirects", "3", "--tee", "3"}) == "launcher.tee=\"all\"");
  CHECK(tee({"--tee", "1", "--redirects", "1"}) == "launcher.tee=\"all\"");
  CHECK(tee({"-r", "3"}) == "launcher.tee=\"none\"");
  CHECK(tee({"-r3", "-t", "0:3"}) == "launcher.tee=\"rank0\"");
  CHECK(tee({"--redirects=0:3,1:3", "--tee", "0:3,1:3"}) == "launcher.tee=\"all\"");
  CHECK(tee({"--tee", "rank0"}) == "launcher.tee=\"rank0\"");
  const CliOptions one_stream = parse_cli({"--redirects", "2", "a.json"});
  CHECK(one_stream.overrides.back() == "launcher.tee=\"all\"");
  REQUIRE(one_stream.notes.size() == 1);
  CHECK_THAT(one_stream.notes[0], Contains("shows only its stdout under torchrun; xlaunch shows both streams"));
}

TEST_CASE("launcher/cli: bad torchrun command lines name the flag", "[cli][torchrun]") {
  using Catch::Matchers::Contains;
  const auto error = [](std::vector<std::string> args) {
    try {
      parse_cli(args);
    } catch (const CliError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(error({"--nnodes", "1:4", "a.py"}), Contains("--nnodes 1:4: elastic ranges (MIN:MAX) are not supported"));
  CHECK_THAT(error({"--nnodes", "two", "a.py"}), Contains("--nnodes: expected an integer >= 1"));
  CHECK_THAT(error({"--nproc_per_node", "many", "a.py"}),
             Contains("--nproc_per_node: expected a number >= 1, auto, gpu or cpu, got \"many\""));
  CHECK_THAT(error({"--nproc-per-node", "0", "a.py"}), Contains("--nproc-per-node: expected an integer >= 1"));
  CHECK_THAT(error({"--master_port", "70000", "a.py"}), Contains("--master_port: expected an integer >= 1 and <= 65535"));
  CHECK_THAT(error({"--max-restarts", "-1", "a.py"}), Contains("--max-restarts: expected an integer >= 0"));
  CHECK_THAT(error({"--node-rank", "x", "a.py"}), Contains("--node-rank: expected an integer >= 0"));
  CHECK_THAT(error({"--monitor-interval", "soon", "a.py"}), Contains("--monitor-interval: expected a number >= 0"));
  CHECK_THAT(error({"--rdzv-backend", "etcd", "a.py"}), Contains("--rdzv-backend etcd: not supported"));
  CHECK_THAT(error({"--rdzv-endpoint", "h:x", "a.py"}), Contains("--rdzv-endpoint: rendezvous endpoint \"h:x\""));
  CHECK_THAT(error({"--rdzv-conf", "read_timeout=3", "a.py"}),
             Contains("--rdzv-conf: \"read_timeout=3\" is not supported; xlaunch takes join_timeout=SECONDS only"));
  CHECK_THAT(error({"--redirects", "4", "a.py"}), Contains("--redirects: expected 0-3"));
  CHECK_THAT(error({"--tee", "0:9", "a.py"}), Contains("--tee: expected all, rank0 or none (or torchrun's"));
  CHECK_THAT(error({"--redirects", "3", "--tee", "1:3", "a.py"}),
             Contains("--redirects/--tee: xlaunch's console shows every rank, rank 0 only, or none"));
  CHECK_THAT(error({"--redirects", "3", "--tee", "rank0", "a.py"}),
             Contains("--tee rank0 and --redirects exclude each other: --redirects goes with torchrun's --tee values"));
  CHECK_THAT(error({"--start-method", "thread", "a.py"}), Contains("--start-method: expected spawn, fork or forkserver"));
  CHECK_THAT(error({"--local-addr", "h", "a.py"}), Contains("torchrun's --local-addr is not supported by xlaunch"));
  CHECK_THAT(error({"--local_ranks_filter", "0", "a.py"}),
             Contains("torchrun's --local_ranks_filter is not supported by xlaunch: use --tee rank0"));
  CHECK_THAT(error({"--"}), Contains("--: expected PROGRAM [ARGS...] after it"));
  CHECK_THAT(error({"-m"}), Contains("-m: expected the program after the options"));
  CHECK_THAT(error({"--no-python", "-m", "pkg"}), Contains("--no-python and -m exclude each other"));
  CHECK_THAT(error({"--standalone", "--nnodes", "2", "a.py"}), Contains("--standalone runs on one node; it excludes --nnodes 2"));
  CHECK_THAT(error({"--log-dir", "d", "--run-dir", "e", "a.py"}), Contains("--log-dir and --run-dir exclude each other"));
  CHECK_THAT(error({"--nproc-per-node", "2"}), Contains("expected a job spec or a program"));
  CHECK_THAT(error({"--standalone=1", "a.py"}), Contains("--standalone: takes no value"));
}

TEST_CASE("launcher/cli: ls and report", "[cli]") {
  CHECK(parse_cli({"ls"}).command == Command::kList);
  CHECK(parse_cli({"ls"}).run_dir == "runs");
  const CliOptions ls = parse_cli({"ls", "elsewhere", "--json"});
  CHECK(ls.run_dir == "elsewhere");
  CHECK(ls.json);
  const CliOptions report = parse_cli({"report", "runs/a", "--out=/tmp/r.html"});
  CHECK(report.command == Command::kReport);
  CHECK(report.run_dir == "runs/a");
  CHECK(report.out == "/tmp/r.html");
  CHECK_THROWS_WITH(parse_cli({"report"}), Catch::Matchers::Contains("expected a run directory: xlaunch report RUN_DIR"));
  CHECK_THROWS_WITH(parse_cli({"ls", "--out", "x"}), Catch::Matchers::Contains("--out is not an option of `xlaunch ls`"));
}

TEST_CASE("launcher/cli: --preempt-grace takes a number of seconds > 0", "[cli]") {
  const CliOptions o = parse_cli({"--preempt-grace", "90", "a.json"});
  CHECK(o.overrides == std::vector<std::string>{"launcher.preempt_grace_s=90.0"});
  for (const char* bad : {"0", "-5", "soon", ""}) {
    INFO(bad);
    CHECK_THROWS_WITH(parse_cli({"--preempt-grace", bad, "a.json"}),
                      "--preempt-grace: expected a number of seconds > 0, got \"" + std::string(bad) + "\"");
  }
}
