// Preemption through the real xlaunch and xtrain-worker: with launcher.preempt_grace_s (or
// --preempt-grace) a SIGTERM to xlaunch makes every rank checkpoint at its next step and exit,
// the run ends "preempted" (summary.json, status, ls), and a rerun resumes to the same parameters,
// bit for bit, as a run that was never stopped. A SIGUSR1-preempted run ends "preempted" too.
#include <csignal>
#include <cstdio>
#include <string>
#include <thread>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/worker/e2e_job.hpp"

using namespace xtrain::test;

namespace {

// Until rank 0 has logged `records` steps to metrics.jsonl (60 s at most).
void await_steps(const fs::path& run_dir, int records) {
  const fs::path metrics = run_dir / "metrics.jsonl";
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (fs::exists(metrics) && read_losses(run_dir).size() >= static_cast<size_t>(records)) return;
    std::this_thread::sleep_for(20ms);
  }
  FAIL("training did not reach " << records << " steps");
}

std::string checkpoint_name(long step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08ld", step);
  return name;
}

}  // namespace

TEST_CASE("SIGTERM under --preempt-grace: every rank checkpoints, the run is preempted, the rerun is bit-exact",
          "[e2e]") {
  Job job("sigterm");
  const std::vector<std::string> steps = {"train.steps=60"};
  require_ok(job.launch("straight", 2, steps));
  const std::string digest = job.common_digest("straight", 2);

  // Rank 0 slowed down (sleeps only: the numbers are the same) so that the signal lands mid-run.
  const pid_t pid = job.start("stopped", 2, steps, {{"XTRAIN_FAULT_SLOW", "0:40"}}, {"--preempt-grace", "30"});
  await_steps(job.run_dir("stopped"), 3);
  REQUIRE(::kill(pid, SIGTERM) == 0);
  const Outcome stopped = job.finish(pid, "stopped");
  INFO(stopped.output);
  CHECK(stopped.exit_code == 128 + SIGTERM);
  const json summary = json::parse(read_text(job.run_dir("stopped") / "summary.json"));
  CHECK(summary.at("status") == "preempted");
  CHECK_THAT(summary.at("exit_reason").get<std::string>(),
             Catch::Matchers::StartsWith("xlaunch received SIGTERM: every rank checkpointed step"));
  const long step = job.result("stopped", 0).at("step").get<long>();
  CHECK(job.result("stopped", 1).at("step") == step);
  CHECK(step < 60);
  CHECK(job.checkpoints("stopped") == std::vector<std::string>{checkpoint_name(step)});

  const Outcome status = job.command({"status", job.run_dir("stopped").string()}, "status");
  CHECK_THAT(status.output, Catch::Matchers::Contains("status:   finished: preempted, exit code 143"));
  CHECK_THAT(status.output, Catch::Matchers::Contains("progress: step " + std::to_string(step) + "/60"));
  CHECK_THAT(status.output, !Catch::Matchers::Contains("ETA"));  // the run has ended
  const Outcome ls = job.command({"ls", (job.dir() / "runs").string()}, "ls");
  CHECK_THAT(ls.output, Catch::Matchers::Contains("preempted (143)"));

  require_ok(job.launch("stopped", 2, steps));
  CHECK(job.result("stopped", 0).at("start_step") == step);
  CHECK(job.common_digest("stopped", 2) == digest);
  CHECK(job.losses("stopped") == job.losses("straight"));
}
