// Integration: every process of the job ends, whatever ends the job; restarts; heartbeats;
// timeouts; forwarded signals.
#include <catch2/catch.hpp>

#include <csignal>

#include <fcntl.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.hpp"

using namespace xtrain::test;
using Catch::Matchers::Contains;

namespace {

// Rank (and grandchild) pids that --pid-dir wrote, waiting up to `timeout_s` for all of them.
std::vector<pid_t> job_pids(const TempDir& dir, int nproc, bool grandchildren, double timeout_s = 10) {
  std::vector<std::string> files;
  for (int rank = 0; rank < nproc; ++rank) {
    files.push_back(dir / ("rank-" + std::to_string(rank) + ".pid"));
    if (grandchildren) files.push_back(dir / ("grandchild-" + std::to_string(rank) + ".pid"));
  }
  std::vector<pid_t> pids;
  const bool all = wait_until([&] {
    pids.clear();
    for (const auto& f : files) pids.push_back(read_pid(f));
    return std::find(pids.begin(), pids.end(), -1) == pids.end();
  }, timeout_s);
  REQUIRE(all);
  return pids;
}

bool all_gone(const std::vector<pid_t>& pids) {
  return std::all_of(pids.begin(), pids.end(), process_gone);
}

Process start_xlaunch(const std::string& spec_path) { return Process({bin_path("xlaunch"), spec_path}); }

// Seconds from the root cause to xlaunch's exit.
double crash_to_exit(const JobRun& r) {
  return r.run.exit_time - parse_iso_time(r.summary["root_cause"]["time"]);
}

}  // namespace

TEST_CASE("launcher/teardown: no process of the job survives a failure", "[integration][teardown]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 3, {"--pid-dir", dir.path(), "--grandchild", "--hang", "--rank", "1",
                                                 "--sleep", "0.3", "--exit", "4"}));
  CHECK(r.run.exit_code == 4);
  CHECK(all_gone(job_pids(dir, 3, true, 0)));  // gone when xlaunch returns, not some time later
}

TEST_CASE("launcher/teardown: SIGTERM, SIGHUP or SIGQUIT to xlaunch stops every rank with SIGTERM and exits 128+N",
          "[integration][teardown]") {
  const int sig = GENERATE(SIGTERM, SIGHUP, SIGQUIT);  // SIGHUP: the terminal closed; SIGQUIT: Ctrl-\ pressed
  const std::string name = std::string("SIG") + sigabbrev_np(sig);
  INFO(name);
  TempDir dir;
  Process xlaunch = start_xlaunch(write_spec(dir, test_spec(dir, 3, {"--pid-dir", dir.path(), "--grandchild", "--hang"})));
  const auto pids = job_pids(dir, 3, true);
  xlaunch.signal(sig);
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  CHECK(r->exit_code == 128 + sig);
  if (sig != SIGTERM) {
    CHECK_THAT(r->err, Contains("received " + name + "; sending SIGTERM to 3 running ranks and stopping"));
  }
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary["status"] == "stopped");
  CHECK(summary["exit_code"] == 128 + sig);
  CHECK(summary["exit_reason"] == "xlaunch received " + name);
  for (const auto& rank : summary["ranks"]) CHECK(rank["signal"] == SIGTERM);
  CHECK(all_gone(pids));
}

// scancel signals every process of the step in no set order: here every rank is killed, and reaped,
// before xlaunch's own SIGTERM comes.
TEST_CASE("launcher/teardown: a job signalled as a whole, its ranks first (scancel), is stopped, not failed",
          "[integration][teardown]") {
  const bool xlaunch_signalled = GENERATE(true, false);
  INFO("xlaunch signalled too: " << xlaunch_signalled);
  TempDir dir;
  Process xlaunch = start_xlaunch(write_spec(dir, test_spec(dir, 2, {"--pid-dir", dir.path(), "--hang"})));
  const auto pids = job_pids(dir, 2, false);
  for (pid_t pid : pids) REQUIRE(::kill(pid, SIGTERM) == 0);
  REQUIRE(wait_until([&] { return all_gone(pids); }, 10));
  if (xlaunch_signalled) {
    ::usleep(300'000);  // the attempt is over long before: the conclusion waits for xlaunch's signal
    xlaunch.signal(SIGTERM);
  }
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  CHECK(r->exit_code == 143);
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary["exit_code"] == 143);
  if (xlaunch_signalled) {
    CHECK(summary["status"] == "stopped");
    CHECK(summary["exit_reason"] == "xlaunch received SIGTERM");
    CHECK(summary["root_cause"].is_null());
    CHECK_THAT(r->err, Contains("the whole job was signalled"));
  } else {  // a rank killed by SIGTERM from elsewhere is a failure, reported once the wait is over
    CHECK(summary["status"] == "failed");
    CHECK_THAT(summary["exit_reason"].get<std::string>(), Contains("killed by signal 15 (SIGTERM)"));
    CHECK(summary["root_cause"]["signal"] == SIGTERM);
  }
}

TEST_CASE("launcher/teardown: a hang-up of the whole process group (a closed terminal) accounts for every worker",
          "[integration][teardown]") {
  TempDir dir;
  Process xlaunch({bin_path("xlaunch"), write_spec(dir, test_spec(dir, 2, {"--pid-dir", dir.path(), "--grandchild",
                                                                           "--hang"}))},
                  nullptr, /*own_group=*/true);
  const auto pids = job_pids(dir, 2, true);
  REQUIRE(::killpg(xlaunch.pid(), SIGHUP) == 0);  // what the kernel sends when the terminal goes
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  CHECK(r->exit_code == 129);
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary["exit_reason"] == "xlaunch received SIGHUP");
  REQUIRE(summary["ranks"].size() == 2);
  for (const auto& rank : summary["ranks"]) {
    CHECK(rank["status"] == "stopped");
    CHECK(rank["signal"] == SIGTERM);
  }
  CHECK(all_gone(pids));
  CHECK(::killpg(xlaunch.pid(), 0) != 0);  // nothing is left in xlaunch's group (the guard has its own)
  CHECK_THAT(read_file(dir / "run/report.html"), Contains("xlaunch received SIGHUP"));
}

TEST_CASE("launcher/teardown: closing xlaunch's terminal stops the job with 129 and a summary",
          "[integration][teardown]") {
  TempDir dir;
  const std::string xlaunch = bin_path("xlaunch");
  const std::string spec = write_spec(dir, test_spec(dir, 2, {"--pid-dir", dir.path(), "--grandchild", "--hang"}));
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);  // xlaunch leads a session on a pty
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl(xlaunch.c_str(), xlaunch.c_str(), spec.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::fcntl(terminal, F_SETFL, O_NONBLOCK);
  const auto drain = [&] {
    char buffer[4096];
    while (::read(terminal, buffer, sizeof(buffer)) > 0) {
    }
  };
  REQUIRE(wait_until([&] {
    drain();
    return read_pid(dir / "rank-1.pid") > 0 && read_pid(dir / "grandchild-1.pid") > 0;
  }, 10));
  const auto pids = job_pids(dir, 2, true);
  ::close(terminal);  // the terminal goes away: the kernel hangs up xlaunch's session
  int status = 0;
  const bool exited = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 10);
  if (!exited) ::kill(pid, SIGKILL), ::waitpid(pid, &status, 0);
  REQUIRE(exited);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 129);
  const auto summary = read_json(dir / "run/summary.json");
  CHECK(summary["exit_reason"] == "xlaunch received SIGHUP");
  for (const auto& rank : summary["ranks"]) CHECK(rank["signal"] == SIGTERM);
  CHECK(all_gone(pids));
}

TEST_CASE("launcher/teardown: SIGINT exits 130 and a second SIGINT kills at once", "[integration][teardown]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--pid-dir", dir.path(), "--ignore-int", "--hang"});
  spec["launcher"]["term_timeout_s"] = 20;
  Process xlaunch = start_xlaunch(write_spec(dir, spec));
  const auto pids = job_pids(dir, 2, false);
  xlaunch.signal(SIGINT);
  CHECK_FALSE(wait_until([&] { return exists(dir / "run/summary.json"); }, 0.3));  // ranks ignore SIGINT
  const double second = now_s();
  xlaunch.signal(SIGINT);
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  CHECK(r->exit_code == 130);
  CHECK(r->exit_time - second < 1.0);
  CHECK_THAT(r->err, Contains("second SIGINT: killing every rank now"));
  CHECK_THAT(r->err, !Contains("still running"));  // the term timeout (20 s) did not run out
  for (const auto& rank : read_json(dir / "run/summary.json")["ranks"]) CHECK(rank["signal"] == SIGKILL);
  CHECK(all_gone(pids));
}

TEST_CASE("launcher/teardown: SIGKILL to xlaunch leaves no rank or grandchild behind", "[integration][teardown]") {
  TempDir dir;
  Process xlaunch = start_xlaunch(write_spec(dir, test_spec(dir, 3, {"--pid-dir", dir.path(), "--grandchild", "--hang"})));
  const auto pids = job_pids(dir, 3, true);
  const pid_t xlaunch_pid = xlaunch.pid();
  xlaunch.signal(SIGKILL);
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  CHECK(r->signal == SIGKILL);
  CHECK(wait_until([&] { return all_gone(pids); }, 2.0));
  CHECK_THAT(r->err, Contains("[xlaunch guard] xlaunch (pid " + std::to_string(xlaunch_pid) +
                              ") died; killed 3 rank process groups"));
  const auto status = run_xlaunch({"status", dir / "run"});
  REQUIRE(status);
  CHECK_THAT(status->out, Contains("status:   lost: the supervisor (pid " + std::to_string(xlaunch_pid)));
}

TEST_CASE("launcher/teardown: a rank that ignores SIGTERM is killed after term_timeout_s", "[integration][teardown]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--rank", "0", "--ignore-term", "--hang", "--rank", "1", "--sleep", "0.2", "--exit", "3"});
  spec["launcher"]["term_timeout_s"] = 1.0;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 3);
  CHECK(r.summary["ranks"][0]["signal"] == SIGKILL);
  CHECK(crash_to_exit(r) >= 0.95);
  CHECK(crash_to_exit(r) <= 1.5);  // term_timeout_s + 0.5 s
  CHECK_THAT(r.run.err, Contains("still running 1 s after SIGTERM; sending SIGKILL"));
}

TEST_CASE("launcher/teardown: a crash among healthy ranks ends the job at once", "[integration][teardown]") {
  TempDir dir;
  auto spec = test_spec(dir, 4, {"--hang", "--rank", "3", "--sleep", "0.3", "--exit", "9"});
  spec["launcher"].erase("term_timeout_s");  // the default, 10 s: healthy ranks stop on SIGTERM long before
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 9);
  CHECK(crash_to_exit(r) < 0.5);
}

TEST_CASE("launcher/teardown: output held open by a process that left its group ends the job anyway",
          "[integration][teardown]") {
  TempDir dir;
  const auto r = run_job(dir, test_spec(dir, 1, {"--pid-dir", dir.path(), "--escaped-grandchild", "--print", "bye"}));
  const pid_t escaped = read_pid(dir / "escaped-0.pid");
  REQUIRE(escaped > 0);
  ::kill(escaped, SIGKILL);  // out of xlaunch's reach by construction
  CHECK(r.run.exit_code == 0);
  CHECK_THAT(r.run.err, Contains("rank 0: output still open 0.3 s after its process group was killed"));
  CHECK_THAT(r.run.out, Contains("[rank 0] bye\n"));
  CHECK(r.summary["duration_s"].get<double>() < 2.0);
}

TEST_CASE("launcher/heartbeat: a rank that stops beating is hung: exit 124", "[integration][heartbeat]") {
  TempDir dir;
  auto spec = test_spec(dir, 3, {"--heartbeat", "0.05", "--hang", "--rank", "2", "--heartbeat-for", "0.3"});
  spec["launcher"]["heartbeat_timeout_s"] = 0.5;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 124);
  CHECK(r.summary["status"] == "hung");
  CHECK(r.summary["root_cause"]["rank"] == 2);
  CHECK(r.summary["root_cause"]["kind"] == "hung");
  CHECK(r.summary["ranks"][2]["status"] == "hung");
  CHECK(r.summary["duration_s"].get<double>() > 0.7);  // 0.3 s of beats + 0.5 s of silence
  CHECK(r.summary["duration_s"].get<double>() < 3.0);
  CHECK_THAT(r.run.err, Contains("rank 2 hung: no heartbeat for 0.5 s"));
}

TEST_CASE("launcher/heartbeat: a rank that never beats is hung too while beating ranks live on", "[integration][heartbeat]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--rank", "0", "--heartbeat", "0.05", "--sleep", "1.2", "--rank", "1", "--hang"});
  spec["launcher"]["heartbeat_timeout_s"] = 0.4;
  const auto hung = run_job(dir, spec);
  CHECK(hung.run.exit_code == 124);
  CHECK(hung.summary["root_cause"]["rank"] == 1);
  CHECK(hung.summary["duration_s"].get<double>() < 1.2);  // detected before rank 0 would have finished

  auto healthy = test_spec(dir, 2, {"--heartbeat", "0.05", "--sleep", "1.2"});
  healthy["launcher"]["heartbeat_timeout_s"] = 0.4;
  CHECK(run_job(dir, healthy).run.exit_code == 0);
}

TEST_CASE("launcher/timeout: launcher.timeout_s ends the job with 124 and no restart", "[integration]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--hang"});
  spec["launcher"]["timeout_s"] = 0.5;
  spec["launcher"]["max_restarts"] = 2;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 124);
  CHECK(r.summary["status"] == "timed_out");
  CHECK(r.summary["attempts"] == 1);
  CHECK(r.summary["duration_s"].get<double>() >= 0.5);
  CHECK(r.summary["duration_s"].get<double>() < 2.0);
}

TEST_CASE("launcher/restart: restarts happen and stop at max_restarts", "[integration][restart]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--print-env", "--hang", "--rank", "1", "--sleep", "0.3", "--exit", "3"});
  spec["launcher"]["max_restarts"] = 2;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 3);
  CHECK(r.summary["attempts"] == 3);
  CHECK(r.summary["attempt_history"].size() == 3);
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> separators, restart_counts, run_ids;
    for (const auto& line : split_lines(read_file(dir / ("run/logs/rank-" + std::to_string(rank) + ".log")))) {
      if (line.rfind("==== xlaunch: ", 0) == 0) separators.push_back(line);
      if (line.rfind("ENV XTRAIN_RESTART_COUNT=", 0) == 0) restart_counts.push_back(line.substr(25));
      if (line.rfind("ENV XTRAIN_RUN_ID=", 0) == 0) run_ids.push_back(line.substr(line.size() - 3));
    }
    REQUIRE(separators.size() == 3);
    CHECK_THAT(separators[0], Contains("attempt 1 of 3 at"));
    CHECK_THAT(separators[1], Contains("attempt 2 of 3 (restart 1) at"));
    CHECK_THAT(separators[2], Contains("attempt 3 of 3 (restart 2) at"));
    CHECK(restart_counts == std::vector<std::string>{"0", "1", "2"});
    CHECK(run_ids == std::vector<std::string>{"-a1", "-a2", "-a3"});
  }
}

TEST_CASE("launcher/restart: a job that recovers after a restart succeeds", "[integration][restart]") {
  TempDir dir;
  auto spec = test_spec(dir, 2, {"--fail-until-restart", "1"});
  spec["launcher"]["max_restarts"] = 3;
  const auto r = run_job(dir, spec);
  CHECK(r.run.exit_code == 0);
  CHECK(r.summary["attempts"] == 2);
  CHECK(r.summary["attempt_history"][0]["status"] == "failed");
  CHECK(r.summary["attempt_history"][1]["status"] == "succeeded");
  CHECK_THAT(r.run.err, Contains("then restarting (1 of 3)"));
}

TEST_CASE("launcher/signals: SIGUSR1 and SIGUSR2 reach every rank", "[integration]") {
  const int sig = GENERATE(SIGUSR1, SIGUSR2);
  TempDir dir;
  // On SIGUSR1 the ranks exit 42; SIGUSR2 they do not handle: it kills them.
  Process xlaunch = start_xlaunch(write_spec(dir, test_spec(dir, 2, {"--pid-dir", dir.path(), "--usr1-exit", "42", "--hang"})));
  job_pids(dir, 2, false);
  xlaunch.signal(sig);
  const auto r = xlaunch.wait(10);
  REQUIRE(r);
  const int expected = sig == SIGUSR1 ? 42 : 128 + SIGUSR2;
  CHECK(r->exit_code == expected);
  for (const auto& rank : read_json(dir / "run/summary.json")["ranks"]) {
    CHECK((sig == SIGUSR1 ? rank["exit_code"] : rank["signal"]) == (sig == SIGUSR1 ? 42 : SIGUSR2));
  }
}

TEST_CASE("launcher/run dir: a second xlaunch, or --check, on a busy run dir is refused with 125", "[integration]") {
  TempDir dir;
  const std::string spec = write_spec(dir, test_spec(dir, 1, {"--pid-dir", dir.path(), "--hang"}));
  Process first = start_xlaunch(spec);
  job_pids(dir, 1, false);
  const auto second = run_xlaunch({spec});
  REQUIRE(second);
  CHECK(second->exit_code == 125);
  CHECK_THAT(second->err, Contains("is in use by another xlaunch"));
  const auto check = run_xlaunch({"--check", spec});  // says so too, with the launch's code
  REQUIRE(check);
  CHECK(check->exit_code == 125);
  CHECK_THAT(check->err, Contains("is in use by another xlaunch"));
  first.signal(SIGTERM);
  const auto r = first.wait(10);
  REQUIRE(r);
  CHECK(r->exit_code == 143);
}
