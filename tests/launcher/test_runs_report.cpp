// Integration: `xlaunch ls` over runs in every state, `xlaunch report`, and the report.html that
// the supervisor keeps while a run goes and writes at its end, whatever the outcome.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <regex>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;

namespace {

// A test-worker spec with its run dir under `runs`/`name`.
nlohmann::json named_spec(const TempDir& dir, const std::string& name, int nproc, const std::vector<std::string>& args) {
  auto spec = test_spec(dir, nproc, args);
  spec["name"] = name;
  spec["run_dir"] = dir / ("runs/" + name);
  return spec;
}

int matches(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(std::distance(std::sregex_iterator(text.begin(), text.end(), re), std::sregex_iterator()));
}

}  // namespace

TEST_CASE("launcher/ls: one line per run with its state and progress and loss with the oldest first", "[integration][report]") {
  TempDir dir;
  const std::string runs = dir / "runs";
  run_job(dir, named_spec(dir, "done", 2, {"--rank", "0", "--metrics", "4"}));
  run_job(dir, named_spec(dir, "broken", 2, {"--rank", "1", "--exit", "3"}));
  {  // lost: the supervisor is killed and leaves no summary
    Process xlaunch({bin_path("xlaunch"),
                     write_spec(dir, named_spec(dir, "killed", 1, {"--pid-dir", dir.path(), "--hang"}), "killed.json")});
    REQUIRE(wait_until([&] { return read_pid(dir / "rank-0.pid") > 0; }, 10));
    xlaunch.signal(SIGKILL);
    REQUIRE(xlaunch.wait(10));
  }
  const auto detached = run_xlaunch({"--detach", write_spec(dir, named_spec(dir, "live", 1, {"--hang"}), "live.json")});
  REQUIRE(detached);
  REQUIRE(wait_until([&] { return read_file(runs + "/live/state.json").find("\"running\"") != std::string::npos; }, 10));

  const auto ls = run_xlaunch({"ls", runs});
  REQUIRE(ls);
  INFO(ls->out);
  CHECK(ls->exit_code == 0);
  const auto lines = split_lines(ls->out);
  REQUIRE(lines.size() == 5);
  CHECK(std::regex_search(lines[0], std::regex("^RUN +STATE +STARTED +DURATION +STEP +LOSS$")));
  CHECK(std::regex_search(lines[1], std::regex(R"(^done +completed +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +[0-9.]+ s +4 +2\.0000$)")));
  CHECK(std::regex_search(lines[2], std::regex(R"(^broken +failed \(3\) +\d{4}-)")));
  CHECK(std::regex_search(lines[3], std::regex(R"(^killed +lost +\d{4}-)")));
  CHECK(std::regex_search(lines[4], std::regex(R"(^live +running +\d{4}-)")));

  const auto json = run_xlaunch({"ls", runs, "--json"});
  REQUIRE(json);
  const auto list = nlohmann::json::parse(json->out);
  REQUIRE(list.size() == 4);
  CHECK(list[0]["name"] == "done");
  CHECK(list[0]["state"] == "completed");
  CHECK(list[0]["exit_code"] == 0);
  CHECK(list[0]["step"] == 4);
  CHECK(list[0]["loss"] == 2.0);
  CHECK(list[1]["state"] == "failed (3)");
  CHECK(list[2]["state"] == "lost");
  CHECK(list[2]["exit_code"].is_null());
  CHECK(list[3]["state"] == "running");

  // A job's per-node run dirs one level down (runs/NAME/node-K) are listed too, by that path.
  std::filesystem::create_directories(runs + "/pair");
  std::filesystem::copy(runs + "/done", runs + "/pair/node-1", std::filesystem::copy_options::recursive);
  const auto nested = run_xlaunch({"ls", runs});
  REQUIRE(nested);
  CHECK(std::regex_search(nested->out, std::regex(R"((^|\n)pair/node-1 +completed +\d{4}-)")));

  // A project directory holding its spec as job.json (run_job wrote one), and runs/: its runs, not
  // itself as a lost one.
  REQUIRE(std::filesystem::exists(dir / "job.json"));
  const auto project = run_xlaunch({"ls", dir.path()});
  REQUIRE(project);
  INFO(project->out);
  CHECK(std::regex_search(project->out, std::regex(R"((^|\n)runs/done +completed +\d{4}-)")));

  // A checkpoint copied beside the runs (its state.json is a checkpoint's, not a supervisor's):
  // not a run.
  std::filesystem::create_directories(runs + "/best");
  write_file(runs + "/best/state.json", R"({"format": "xtrain-checkpoint", "format_version": 2, "step": 7})");
  const auto with_copy = run_xlaunch({"ls", runs});
  REQUIRE(with_copy);
  CHECK(with_copy->out.find("best") == std::string::npos);
  CHECK(split_lines(with_copy->out).size() == split_lines(nested->out).size());

  const auto one = run_xlaunch({"ls", runs + "/done"});  // a run dir itself: that run
  REQUIRE(one);
  CHECK(split_lines(one->out).size() == 2);
  const auto stop = run_xlaunch({"stop", runs + "/live"}, 20);
  REQUIRE(stop);
  const auto missing = run_xlaunch({"ls", dir / "nowhere"});
  REQUIRE(missing);
  CHECK(missing->exit_code == 2);
  CHECK_THAT(missing->err, Contains("is not a directory"));
}

TEST_CASE("launcher/report: every outcome leaves a report and a failed run's names the root cause", "[integration][report]") {
  TempDir dir;
  const auto ok = run_job(dir, named_spec(dir, "ok", 2, {"--rank", "0", "--metrics", "5"}));
  CHECK(ok.run.exit_code == 0);
  const std::string ok_report = read_file(dir / "runs/ok/report.html");
  CHECK_THAT(ok_report, Contains(R"(<span class="badge completed">completed</span>)"));
  CHECK(matches(ok_report, R"(<footer>Written by xlaunch [0-9]+\.[0-9]+\.[0-9]+ \(commit [^)]+\) from )") == 1);
  for (const char* chart : {"loss-step", "lr", "grad-norm", "tokens-per-s", "rank-step-ms"}) {
    CHECK(matches(ok_report, std::string("data-chart=\"") + chart + "\" viewBox") == 1);
  }
  CHECK(matches(ok_report, R"(data-series="train loss" data-count="5" data-records="5")") == 1);
  CHECK(matches(ok_report, R"(data-series="rank [01]" data-count="5")") == 2);
  CHECK_THAT(ok_report, Contains(R"(data-chart="loss-tokens" viewBox="0 0 640 300" role="img" aria-label="Loss by tokens seen" data-empty="true")"));

  const auto failed = run_job(dir, named_spec(dir, "failed", 2,
                                              {"--rank", "1", "--print", "loading shard 7", "--result-error",
                                               "shard 7 is truncated", "--exit", "3", "--rank", "0", "--hang"}));
  CHECK(failed.run.exit_code == 3);
  const std::string failed_report = read_file(dir / "runs/failed/report.html");
  CHECK_THAT(failed_report, Contains(R"(<span class="badge failed">failed (3)</span>)"));
  CHECK_THAT(failed_report, Contains("Root cause: <b>rank 1 on node 0"));
  CHECK_THAT(failed_report, Contains("exited with code 3"));
  CHECK_THAT(failed_report, Contains("Message: <b>shard 7 is truncated</b>"));
  CHECK_THAT(failed_report, Contains("<pre>loading shard 7\n</pre>"));

  Process stopped({bin_path("xlaunch"), write_spec(dir, named_spec(dir, "stopped", 1, {"--print", "up", "--hang"}), "s.json")});
  REQUIRE(wait_until([&] { return read_file(dir / "runs/stopped/logs/rank-0.log").find("up") != std::string::npos; }, 10));
  stopped.signal(SIGTERM);
  REQUIRE(stopped.wait(10));
  CHECK_THAT(read_file(dir / "runs/stopped/report.html"), Contains("xlaunch received SIGTERM"));

  // xlaunch report: any run dir, anywhere.
  const auto r = run_xlaunch({"report", dir / "runs/failed", "--out", dir / "copy.html"});
  REQUIRE(r);
  CHECK(r->exit_code == 0);
  CHECK_THAT(r->out, Contains("xlaunch: wrote " + dir / "copy.html" + " (failed (3), 0 step records)"));
  CHECK_THAT(read_file(dir / "copy.html"), Contains("shard 7 is truncated"));
  const auto not_a_run = run_xlaunch({"report", dir / "runs"});
  REQUIRE(not_a_run);
  CHECK(not_a_run->exit_code == 2);
  CHECK_THAT(not_a_run->err, Contains("is not a run directory"));
}

TEST_CASE("launcher/report: the supervisor rewrites report.html while the run goes", "[integration][report]") {
  TempDir dir;
  auto spec = named_spec(dir, "live", 2, {"--rank", "0", "--metrics", "3", "--rank", "all", "--hang"});
  Process xlaunch({bin_path("xlaunch"), write_spec(dir, spec)});
  const std::string report = dir / "runs/live/report.html";
  const double started = now_s();
  // The timer looks every 10 s; metrics exist from the start, so the first look writes.
  REQUIRE(wait_until([&] { return exists(report); }, 15));
  const double written = now_s() - started;
  CHECK(written >= 9.0);
  const std::string live = read_file(report);
  CHECK_THAT(live, Contains(R"(<span class="badge running">running</span>)"));
  CHECK_THAT(live, Contains(R"(<meta http-equiv="refresh" content="10">)"));
  CHECK_THAT(live, Contains(R"(data-series="train loss" data-count="3")"));
  xlaunch.signal(SIGTERM);
  const auto r = xlaunch.wait(30);  // from its start
  REQUIRE(r);
  CHECK(r->exit_code == 143);
  const std::string final_report = read_file(report);
  CHECK_THAT(final_report, Contains(R"(<span class="badge stopped">stopped (143)</span>)"));
  CHECK_THAT(final_report, !Contains("http-equiv=\"refresh\""));
}
