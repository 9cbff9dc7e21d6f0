// What xlaunch tells about a running or failing job of real xtrain-workers (CPU ranks, Gloo):
// hang reports that name the rank behind and its phase (a SIGSTOPped rank, a rank asleep in
// backward), straggler warnings, the root cause when the first failure is only the echo of a
// peer's (a rank that exits, a disk that fills), backtraces on demand, and `xlaunch status`
// during a run and after its supervisor was killed.
#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/worker/e2e_job.hpp"

using namespace xtrain::test;

namespace {

// Blocks until metrics.jsonl has a record of step >= `step` (log_every 1), at most 120 s.
// Rank -> pid from the live state.json.
std::map<int, pid_t> rank_pids(const fs::path& run_dir) {
  std::map<int, pid_t> pids;
  const json state = json::parse(read_text(run_dir / "state.json"));
  for (const auto& r : state.at("ranks")) {
    pids[r.at("rank").get<int>()] = r.at("pid").get<pid_t>();
  }
  if (pids.size() != state.at("ranks").size() || pids.size() < 2) FAIL(state.dump());
  return pids;
}

bool gone(pid_t pid) { return ::kill(pid, 0) != 0; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

json summary_of(const Job& job, const std::string& run) {
  return json::parse(read_text(job.run_dir(run) / "summary.json"));
}

}  // namespace

TEST_CASE("a SIGSTOPped rank of 4: the hang report names it before anything is killed", "[e2e][hang]") {
  Job job("stopped");
  const pid_t xlaunch = job.start("run", 4, {"train.steps=100000", "launcher.heartbeat_timeout_s=5"});
  wait_for_step(job.run_dir("run"), 3);
  const std::map<int, pid_t> pids = rank_pids(job.run_dir("run"));
  REQUIRE(::kill(pids.at(3), SIGSTOP) == 0);
  const int code = wait_for(xlaunch, 120s);
  const std::string output = read_text(job.dir() / "run.out");
  INFO(output);
  CHECK(code == 124);
  const json summary = summary_of(job, "run");
  const json& report = summary.at("hang_report");
  INFO(report.dump(2));
  CHECK(report.at("trigger") == "heartbeat");
  CHECK(report.at("behind") == json::array({3}));
  const std::string sentence = report.at("summary").get<std::string>();
  CHECK(sentence.rfind("rank 3 is stopped (SIGSTOP): it ", 0) == 0);
  CHECK(output.find("where the ranks are: " + sentence) != std::string::npos);
  // The first line that names a hung rank names the one the diagnosis found, whichever watchdog fired.
  const size_t named = output.find(" hung: no heartbeat for 5 s; stopping ");
  REQUIRE(named != std::string::npos);
  CHECK(output.compare(named - 6, 6, "rank 3") == 0);
  CHECK(output.find("sent no heartbeat for 5 s (launcher.heartbeat_timeout_s)") < named);
  CHECK(summary.at("root_cause").at("rank") == 3);
  CHECK(summary.at("ranks").at(3).at("status") == "hung");
  const json& stopped = report.at("ranks").at(3);
  CHECK(stopped.at("state") == "T");
  CHECK(stopped.at("backtrace").empty());
  CHECK(stopped.at("backtrace_note") == "stopped: it cannot run a signal handler");
  for (int r = 0; r < 3; ++r) {
    const json& rank = report.at("ranks").at(r);
    INFO("rank " << r);
    CHECK(rank.at("progress").at("phase").is_string());
    CHECK(rank.at("threads").size() >= 2);  // the training thread and Gloo's
    const std::string trace = rank.at("backtrace").dump();
    CHECK(trace.find("end of thread ") != std::string::npos);
    CHECK(trace.find("xtrain::Trainer::run(") != std::string::npos);  // demangled, from -rdynamic
  }
  for (const auto& [rank, pid] : pids) CHECK(gone(pid));
}

TEST_CASE("a rank asleep in backward: the summary names it, its layer, and what the others wait on", "[e2e][hang]") {
  Job job("asleep");
  const Outcome o = job.launch("run", 4, {"train.steps=100", "launcher.heartbeat_timeout_s=5"},
                               {{"XTRAIN_FAULT_SLEEP", "1:5:1"}});
  INFO(o.output);
  CHECK(o.exit_code == 124);
  const json summary = summary_of(job, "run");
  const json& report = summary.at("hang_report");
  CHECK(report.at("summary") ==
        "rank 1 is in backward layer 1 of step 5; ranks 0 and 2-3 wait on all-reduce bucket 1 of step 5");
  CHECK(summary.at("root_cause").at("rank") == 1);
  CHECK(summary.at("exit_reason") == "rank 1 hung: no heartbeat for 5 s");
  const std::string trace = report.at("ranks").at(1).at("backtrace").dump();
  CHECK(trace.find("xtrain::FaultInjection::at_backward_layer(") != std::string::npos);
  CHECK(trace.find("xtrain::GPT::backward(") != std::string::npos);
  CHECK(report.at("ranks").at(0).at("progress").at("bucket") == 1);
}

TEST_CASE("a worker started by a wrapper script: the report still finds it and its stack", "[e2e][hang]") {
  Job job("wrapped");
  job.spec()["worker"]["command"] = {"/bin/sh", "-c", std::string(XTRAIN_BIN_DIR) + "/xtrain-worker; exit $?"};
  const Outcome o = job.launch("run", 2, {"train.steps=100", "launcher.heartbeat_timeout_s=5"},
                               {{"XTRAIN_FAULT_SLEEP", "0:3:1"}});
  INFO(o.output);
  CHECK(o.exit_code == 124);
  const json report = summary_of(job, "run").at("hang_report");
  CHECK(report.at("behind") == json::array({0}));
  CHECK(report.at("summary").get<std::string>().rfind("rank 0 is in backward layer 1 of step 3", 0) == 0);
  const json& rank0 = report.at("ranks").at(0);
  CHECK(rank0.at("pid") != summary_of(job, "run").at("ranks").at(0).at("pid"));  // the worker, not the shell
  CHECK(rank0.at("backtrace").dump().find("xtrain::GPT::backward(") != std::string::npos);
}

TEST_CASE("a rank 4x slower than the others: one warning, and listed as a straggler", "[e2e][stragglers]") {
  Job job("straggler");
  job.spec()["model"]["n_embd"] = 64;
  job.spec()["model"]["seq_len"] = 32;
  const Outcome o = job.launch("run", 4, {"train.steps=100"}, {{"XTRAIN_FAULT_SLOW", "2:4"}});
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  const json stragglers = summary_of(job, "run").at("stragglers");
  INFO(stragglers.dump());
  const auto rank2 = std::count_if(stragglers.begin(), stragglers.end(), [](const json& s) { return s.at("rank") == 2; });
  CHECK(rank2 >= 1);
  CHECK(count(o.output, "rank 2 is a straggler: ") == static_cast<size_t>(rank2));  // one line each, not per step
  for (const json& s : stragglers) {
    if (s.at("rank") != 2) continue;
    CHECK(s.at("first_step").get<long>() >= 1);
    CHECK(s.at("slower_by").get<double>() > 0.5);
  }
  // metrics.jsonl has every rank's busy time, and rank 2's is the largest.
  std::vector<double> sums(4, 0.0);
  std::ifstream metrics(job.run_dir("run") / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const json record = json::parse(line);
    if (!record.contains("rank_step_ms")) continue;
    REQUIRE(record.at("rank_step_ms").size() == 4);
    for (int r = 0; r < 4; ++r) sums[r] += record.at("rank_step_ms").at(r).get<double>();
  }
  CHECK(std::max_element(sums.begin(), sums.end()) - sums.begin() == 2);
}

TEST_CASE("a rank that exits 3 while its peer waits in a collective is the root cause, not the peer", "[e2e][root]") {
  Job job("echo");
  // Rank 1 closes its connections at step 5 and exits a second later: its peer's failure
  // ("a peer died") is reaped first, and must not be taken for the cause.
  const Outcome o = job.launch("run", 2, {"train.steps=100", "launcher.tee=none"},
                               {{"XTRAIN_FAULT_EXIT", "1:5:3:1"}});
  INFO(o.output);
  CHECK(o.exit_code == 3);
  const json summary = summary_of(job, "run");
  CHECK(summary.at("root_cause").at("rank") == 1);
  CHECK(summary.at("root_cause").at("exit_code") == 3);
  CHECK(summary.at("ranks").at(0).at("result").at("failure_kind") == "peer_lost");
  CHECK(summary.at("ranks").at(1).at("result").at("failure_kind") == "primary");
  CHECK(o.output.find("rank 0 failed: exit code 1, because a peer died (peer_lost)") != std::string::npos);
  // With --tee none the console still shows the real error: the supervisor prints it.
  CHECK(o.output.find("message: XTRAIN_FAULT_EXIT: rank 1 fails at step 5 with exit code 3") != std::string::npos);
}

TEST_CASE("a disk that fills: the rank that could not write is the root cause in every trial", "[e2e][root]") {
  Job job("full");
  for (int trial = 0; trial < 3; ++trial) {
    const std::string run = "run" + std::to_string(trial);
    Tmpfs disk(job.run_dir(run) / "checkpoints", "64k");  // the model's first checkpoint needs ~360 KB
    if (!disk.mounted) {
      WARN("skipped: mounting a tmpfs needs root (CI runs as root)");
      return;
    }
    const Outcome o = job.launch(run, 2, {"train.steps=20", "checkpoint.every=10", "launcher.tee=none"});
    INFO("trial " << trial << "\n" << o.output);
    CHECK(o.exit_code == 1);
    const json cause = summary_of(job, run).at("root_cause");
    CHECK(cause.at("rank") == 0);
    CHECK(cause.at("message").get<std::string>().find("No space left on device") != std::string::npos);
    CHECK(o.output.find("failed: exit code 1") != std::string::npos);
    CHECK(o.output.find("write failed: No space left on device") != std::string::npos);
  }
}

TEST_CASE("SIGUSR2 to xlaunch: every rank writes a backtrace and training goes on", "[e2e][hang]") {
  Job job("usr2");
  const pid_t xlaunch = job.start("run", 2, {"train.steps=400"});
  wait_for_step(job.run_dir("run"), 3);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(::kill(xlaunch, SIGUSR2) == 0);
    std::this_thread::sleep_for(100ms);
  }
  const int code = wait_for(xlaunch, 120s);
  INFO(read_text(job.dir() / "run.out"));
  CHECK(code == 0);
  CHECK(job.result("run", 1).at("step") == 400);
  for (int r = 0; r < 2; ++r) {
    const std::string trace = read_text(job.run_dir("run") / "ranks" / ("rank-" + std::to_string(r) + ".backtrace"));
    CHECK(count(trace, "end of thread ") >= 1);
  }
}

TEST_CASE("xlaunch status shows where training is, and after the supervisor was killed, no dead rank as running",
          "[e2e][status]") {
  Job job("status");
  const pid_t xlaunch = job.start("run", 2, {"train.steps=100000", "launcher.heartbeat_timeout_s=30"});
  const fs::path run = job.run_dir("run");
  wait_for_step(run, 3);

  const Outcome text = job.command({"status", run.string()}, "status");
  INFO(text.output);
  CHECK(text.exit_code == 0);
  CHECK(text.output.find("status:   running") != std::string::npos);
  CHECK(text.output.find("progress: step ") != std::string::npos);
  CHECK(text.output.find("/100000 | loss ") != std::string::npos);
  CHECK(text.output.find(" tok/s | ETA ") != std::string::npos);
  CHECK(count(text.output, " of step ") + count(text.output, "checkpoint") >= 2);  // every rank's phase

  const Outcome as_json = job.command({"status", run.string(), "--json"}, "status-json");
  const json live = json::parse(as_json.output);
  CHECK(live.at("progress").at("step").get<long>() >= 3);
  CHECK(live.at("progress").at("total_steps") == 100000);
  CHECK(live.at("progress").at("tokens_per_s").get<double>() > 0);
  CHECK(live.at("stragglers").is_array());
  for (const json& rank : live.at("ranks")) {
    CHECK(rank.at("status") == "running");
    CHECK(rank.at("alive") == true);
    CHECK(rank.at("heartbeat_age_s").get<double>() < 30);
    CHECK(rank.at("phase").at("phase").is_string());
    CHECK(rank.at("phase").at("text").is_string());
  }

  const std::map<int, pid_t> pids = rank_pids(run);
  REQUIRE(::kill(xlaunch, SIGKILL) == 0);
  wait_for(xlaunch, 10s);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!std::all_of(pids.begin(), pids.end(), [](const auto& p) { return gone(p.second); })) {
    REQUIRE(std::chrono::steady_clock::now() < deadline);  // the guard kills the ranks
    std::this_thread::sleep_for(20ms);
  }
  const Outcome lost = job.command({"status", run.string()}, "lost");
  INFO(lost.output);
  CHECK(lost.output.find("status:   lost") != std::string::npos);
  CHECK(lost.output.find(" running ") == std::string::npos);
  CHECK(count(lost.output, "  last: ") == 2);  // where each rank was when it was killed
  const json after = json::parse(job.command({"status", run.string(), "--json"}, "lost-json").output);
  CHECK(after.at("supervisor_running") == false);
  for (const json& rank : after.at("ranks")) {
    CHECK(rank.at("status") == "gone");
    CHECK(rank.at("alive") == false);
  }
}
