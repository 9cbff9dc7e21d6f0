// Integration: --dry-run, --check, --detach, status, logs, stop.
#include <catch2/catch.hpp>

#include <csignal>
#include <regex>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("launcher/dry-run: prints the resolved plan and starts nothing", "[integration][subcommands]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 2, {"--pid-dir", dir.path()}), {"--dry-run", "--set", "launcher.max_restarts=4"});
  CHECK(r.run.exit_code == 0);
  const auto plan = nlohmann::json::parse(r.run.out);
  CHECK(plan["spec"]["launcher"]["max_restarts"] == 4);
  CHECK(plan["world"]["world_size"] == 2);
  REQUIRE(plan["ranks"].size() == 2);
  CHECK(plan["ranks"][1]["argv"][0] == bin_path("xtrain-test-worker"));
  CHECK(plan["ranks"][1]["env"]["RANK"] == "1");
  CHECK(plan["ranks"][1]["env"]["XTRAIN_MAX_RESTARTS"] == "4");
  CHECK_FALSE(exists(dir / "run"));
  CHECK_FALSE(exists(dir / "rank-0.pid"));
}

TEST_CASE("launcher/check: 0 for a valid spec and 2 for an invalid one creating nothing", "[integration][subcommands]") {
  TempDir dir;
  const std::string spec = write_spec(dir, test_spec(dir, 2, {}));
  auto r = run_xlaunch({"--check", spec});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(r->out, Contains("is valid: 2 rank(s) on cpu with gloo"));
  r = run_xlaunch({"--check", spec, "--set", "launcher.tee=some"});
  REQUIRE(r);
  CHECK(r->exit_code == 2);
  CHECK_THAT(r->err, Contains("launcher.tee: expected one of"));
  CHECK_FALSE(exists(dir / "run"));
}

TEST_CASE("launcher/detach: status and logs and stop work on a detached supervisor", "[integration][subcommands]") {
  TempDir dir;
  const auto r = run_xlaunch({"--detach", write_spec(dir, test_spec(dir, 2, {"--print", "started", "--hang"}))}, 10);
  REQUIRE(r);
  REQUIRE(r->exit_code == 0);
  const std::string run = dir / "run";
  CHECK_THAT(r->out, StartsWith("run_dir: " + run + "\npid: "));
  const pid_t pid = std::stoi(r->out.substr(r->out.find("pid: ") + 5));
  CHECK_FALSE(process_gone(pid));

  CHECK(wait_until([&] {
    const auto status = run_xlaunch({"status", run, "--json"});
    return status && nlohmann::json::parse(status->out)["status"] == "running";
  }, 10));
  const auto status = run_xlaunch({"status", run});
  REQUIRE(status);
  CHECK_THAT(status->out, Contains("status:   running (supervisor pid " + std::to_string(pid)));
  CHECK(wait_until([&] { return read_file(run + "/logs/rank-1.log").find("started") != std::string::npos; }, 10));

  const auto stop = run_xlaunch({"stop", run}, 20);
  REQUIRE(stop);
  CHECK(stop->exit_code == 0);
  CHECK_THAT(stop->out, Contains("the run ended: stopped, exit code 143: xlaunch received SIGTERM"));
  CHECK(wait_until([&] { return process_gone(pid); }, 2));
  const auto after = run_xlaunch({"status", run, "--json"});
  REQUIRE(after);
  const auto final_status = nlohmann::json::parse(after->out);
  CHECK(final_status["status"] == "stopped");
  CHECK(final_status["supervisor_running"] == false);
  CHECK_THAT(read_file(run + "/logs/xlaunch.log"), Contains("received SIGTERM"));
}

TEST_CASE("launcher/logs: a finished run's logs raw for one rank or prefixed for all", "[integration][subcommands]") {
  TempDir dir;
  run_job(dir, test_spec(dir, 2, {"--print", "alpha", "--print-partial", "omega"}));
  const std::string run = dir / "run";
  const auto one = run_xlaunch({"logs", run, "--rank", "1"});
  REQUIRE(one);
  CHECK(one->exit_code == 0);
  CHECK(one->out == read_file(run + "/logs/rank-1.log"));
  const auto all = run_xlaunch({"logs", run});
  REQUIRE(all);
  CHECK_THAT(all->out, Contains("[rank 0] alpha\n[rank 0] omega\n"));
  CHECK_THAT(all->out, Contains("[rank 1] alpha\n[rank 1] omega\n"));
  const auto missing = run_xlaunch({"logs", run, "--rank", "5"});
  REQUIRE(missing);
  CHECK(missing->exit_code == 2);
}

TEST_CASE("launcher/logs: --follow streams a live run and ends with it", "[integration][subcommands]") {
  TempDir dir;
  const std::string run = dir / "run";
  Process xlaunch({bin_path("xlaunch"),
                   write_spec(dir, test_spec(dir, 2, {"--print", "first", "--sleep", "0.8", "--print", "second"}))});
  REQUIRE(wait_until([&] { return read_file(run + "/logs/rank-0.log").find("first") != std::string::npos; }, 10));
  Process follow({bin_path("xlaunch"), "logs", run, "--follow"});
  const auto done = xlaunch.wait(10);
  const auto followed = follow.wait(10);
  REQUIRE(done);
  REQUIRE(followed);
  CHECK(followed->exit_code == 0);
  CHECK(followed->exit_time >= done->exit_time - 0.05);
  CHECK_THAT(followed->out, Contains("[rank 0] first\n"));
  CHECK_THAT(followed->out, Contains("[rank 0] second\n"));
  CHECK_THAT(followed->out, Contains("[rank 1] second\n"));
}

TEST_CASE("launcher/status: a directory that is not a run, or a checkpoint, is an error",
          "[integration][subcommands]") {
  TempDir dir;
  for (const char* command : {"status", "logs", "stop", "report"}) {
    const auto r = run_xlaunch({command, dir.path()});
    REQUIRE(r);
    CHECK(r->exit_code == 2);
    CHECK_THAT(r->err, Contains("is not a run directory (no state.json or summary.json)"));
  }
  // A checkpoint holds a state.json too: in its run dir (checkpoints/ or superseded/<time>/), and
  // a copy elsewhere.
  REQUIRE(run_job(dir, test_spec(dir, 1, {})).run.exit_code == 0);
  const std::string state = R"({"format": "xtrain-checkpoint", "format_version": 2, "step": 7})";
  for (const std::string checkpoint : {"run/checkpoints/step-00000007", "run/superseded/20261207-101500/step-00000007/",
                                       "best"}) {
    std::filesystem::create_directories(dir / checkpoint);
    write_file(dir / checkpoint + "/state.json", state);
    for (const char* command : {"status", "logs", "stop", "report"}) {
      INFO(command << " " << checkpoint);
      const auto r = run_xlaunch({command, dir / checkpoint});
      REQUIRE(r);
      CHECK(r->exit_code == 2);
      const std::string what = "\"" + dir / checkpoint + "\" is a checkpoint (step 7), not a run directory";
      CHECK_THAT(r->err, Contains(checkpoint == "best" ? what + "\n" : what + ": it belongs to the run directory \"" +
                                                                          dir / "run" + "\"\n"));
    }
  }
  // Nor is a checkpoint a run dir to run in: its state.json would be overwritten.
  const std::string spec = write_spec(dir, test_spec(dir, 1, {}));
  const auto run_in = run_xlaunch({"--check", spec, "--set", "run_dir=" + dir / "best"});
  REQUIRE(run_in);
  CHECK(run_in->exit_code == 2);
  CHECK_THAT(run_in->err, Contains("run_dir: \"" + dir / "best" + "\" is a checkpoint (step 7), not a run directory; a "
                                   "run there would overwrite its state.json"));
  CHECK(read_file(dir / "best/state.json") == state);
}

TEST_CASE("launcher/status: a damaged summary.json is named, and status, logs, stop and ls go on from state.json",
          "[integration][subcommands]") {
  TempDir dir;
  REQUIRE(run_job(dir, test_spec(dir, 2, {"--print", "alpha"})).run.exit_code == 0);
  const std::string run = dir / "run";
  const std::string summary = read_file(run + "/summary.json");
  write_file(run + "/summary.json", summary.substr(0, summary.size() / 2));  // cut short
  const std::string warning = "xlaunch: warning: " + run + "/summary.json: malformed JSON: ";
  const auto status = run_xlaunch({"status", run});
  REQUIRE(status);
  CHECK(status->exit_code == 0);
  CHECK_THAT(status->err, StartsWith(warning));
  CHECK_THAT(status->err, Contains("; showing state.json instead\n"));
  CHECK_THAT(status->out, Contains("is gone and its summary.json is unreadable; its ranks are checked"));
  CHECK_THAT(status->out, Contains("succeeded"));  // each rank's status, from state.json
  const auto json_status = run_xlaunch({"status", run, "--json"});
  REQUIRE(json_status);
  CHECK(json_status->exit_code == 0);
  CHECK(nlohmann::json::parse(json_status->out)["source"] == "state.json");
  const auto logs = run_xlaunch({"logs", run});  // needs no summary at all
  REQUIRE(logs);
  CHECK(logs->exit_code == 0);
  CHECK(logs->err.empty());
  CHECK_THAT(logs->out, Contains("[rank 1] alpha\n"));
  const auto stop = run_xlaunch({"stop", run});
  REQUIRE(stop);
  CHECK(stop->exit_code == 0);
  CHECK(stop->out == "xlaunch: no supervisor is running in " + run + "\n");
  const auto ls = run_xlaunch({"ls", dir.path()});
  REQUIRE(ls);
  CHECK(ls->exit_code == 0);
  CHECK_THAT(ls->out, Contains(" lost (summary.json unreadable) "));
}

TEST_CASE("launcher/status: stragglers with their start, how much slower, and their recovery", "[integration][subcommands]") {
  TempDir dir;
  const auto done = run_job(dir, test_spec(dir, 1, {}));
  REQUIRE(done.run.exit_code == 0);
  nlohmann::json summary = done.summary;
  summary["stragglers"] = {
      {{"rank", 1}, {"first_step", 202}, {"warned_step", 212}, {"slower_by", 0.79}, {"recovered_step", 633}},
      {{"rank", 3}, {"first_step", 1200}, {"warned_step", 1217}, {"slower_by", 0.4}}};
  write_file(dir / "run/summary.json", summary.dump());
  const auto r = run_xlaunch({"status", dir / "run"});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(r->out, Contains("stragglers: rank 1 (79% slower from step 202, recovered at step 633), "
                              "rank 3 (40% slower from step 1200)\n"));
}

TEST_CASE("launcher/version: xlaunch, xtrain-worker and xtrain-data say their build, and summary.json records it",
          "[integration][subcommands]") {
  std::string version;
  for (const char* program : {"xlaunch", "xtrain-worker", "xtrain-data"}) {
    Process p({bin_path(program), "--version"});
    const auto r = p.wait(10);
    REQUIRE(r);
    INFO(program << ": " << r->out << r->err);
    CHECK(r->exit_code == 0);
    std::smatch m;
    // The commit is the source tree's (unknown outside a git checkout), the same in every program.
    REQUIRE(std::regex_match(r->out, m, std::regex(std::string(program) +
                                                   R"( ([0-9]+\.[0-9]+\.[0-9]+ \(commit ([0-9a-f]{12}(-dirty)?|unknown)\))\n)")));
    if (version.empty()) version = m[1];
    CHECK(m[1] == version);
  }
  TempDir dir;
  const auto done = run_job(dir, test_spec(dir, 1, {}));
  CHECK(done.summary.at("xlaunch_version") == version);
}
