#include <catch2/catch.hpp>

#include "common/job_spec.hpp"
#include "launcher/cli.hpp"

#include <nlohmann/json.hpp>

using namespace xtrain::launcher;

TEST_CASE("launcher/cli: a run with every option", "[cli]") {
  const CliOptions o = parse_cli({"--set", "launcher.max_restarts=2", "job.json", "--nproc-per-node", "auto",
                                  "--run-dir=123", "--tee", "rank0", "--set=name=x"});
  CHECK(o.command == Command::kRun);
  CHECK(o.job_path == "job.json");
  CHECK(o.overrides == std::vector<std::string>{"launcher.max_restarts=2", "nproc_per_node=auto",
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
  CHECK_THROWS_WITH(parse_cli({"a.json", "--frobnicate"}), Contains("unknown option --frobnicate"));
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
