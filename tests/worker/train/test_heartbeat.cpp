// The progress record (worker/train/heartbeat.hpp writes it, common/heartbeat_record.hpp reads it), the
// backtrace handler, metrics.jsonl after a resume, and the fault-injection variables.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/heartbeat_record.hpp"
#include "tests/worker/test_files.hpp"
#include "worker/train/backtrace.hpp"
#include "worker/train/fault_injection.hpp"
#include "worker/train/heartbeat.hpp"
#include "worker/train/run_report.hpp"

using namespace xtrain;
using xtrain::test::read_bytes;
using xtrain::test::ScratchDir;
using xtrain::test::write_bytes;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    lines.push_back(text.substr(at, end == std::string::npos ? std::string::npos : end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return lines;
}

}  // namespace

TEST_CASE("the heartbeat record written by a rank reads back field for field", "[heartbeat]") {
  ScratchDir dir;
  const std::string path = dir / "rank-0.heartbeat";
  Heartbeat beat(path);
  beat.set_plan(100, 2, 4);
  beat.set_backtrace_signal(SIGUSR2);
  beat.begin_step(7);
  beat.micro_step(1);
  beat.phase(WorkerPhase::kBackward, 3);
  StepStats stats;
  stats.step = 6;
  stats.loss = 2.5;
  stats.busy_ms = 12.0;
  stats.step_ms = 40.0;
  beat.end_step(stats, 1234.0, 56.0);
  beat.set_comm_bucket(2);

  const auto r = read_heartbeat_record(path);
  REQUIRE(r);
  CHECK(r->magic == kHeartbeatMagic);
  CHECK(r->version == kHeartbeatVersion);
  CHECK(r->size == sizeof(HeartbeatRecord));
  CHECK(r->sequence % 2 == 0);
  CHECK(r->pid == ::getpid());
  CHECK(r->step == 7);
  CHECK(r->total_steps == 100);
  CHECK(r->micro_step == 1);
  CHECK(r->micro_steps == 2);
  CHECK(r->n_layer == 4);
  CHECK(r->phase == static_cast<std::uint16_t>(WorkerPhase::kBackward));
  CHECK(r->detail == 3);
  CHECK(r->comm_bucket == 2);
  CHECK(r->backtrace_signal == SIGUSR2);
  CHECK(r->last_step == 6);
  CHECK(r->last_loss == 2.5f);
  CHECK(r->busy_ms == 12.0f);
  CHECK(r->step_ms == 40.0f);
  CHECK(r->tokens_per_s == 1234.0f);
  CHECK(r->eta_s == 56.0f);
  CHECK(r->updated_ns >= r->phase_since_ns);
  CHECK(r->updated_ns <= realtime_ns());
  CHECK(describe_phase(*r) == "is in backward layer 3 of step 7 (micro-step 2 of 2)");

  const nlohmann::json j = to_json(*r, realtime_ns());
  CHECK(j["phase"] == "backward");
  CHECK(j["layer"] == 3);
  CHECK(j["bucket"].is_null());
  CHECK(j["loss"] == 2.5);
  CHECK(j["phase_age_s"].get<double>() >= 0);
}

TEST_CASE("a rank waiting on a checkpoint beats from a thread of its own, and stops when the wait ends",
          "[heartbeat]") {
  ScratchDir dir;
  const std::string path = dir / "rank-1.heartbeat";
  const Heartbeat beat(path);
  const auto mtime = [&] {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec);
  };
  const timespec old_times[2] = {{1, 0}, {1, 0}};  // 1970: any beat is later
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
  {
    const BeatWhileWaiting waiting(beat);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));  // 2 beats at least, at 250 ms
    CHECK(mtime() > std::chrono::seconds(1));
    REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    CHECK(mtime() > std::chrono::seconds(1));  // it went on beating
  }  // joined here: the wait is over
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK(mtime() == std::chrono::seconds(1));
}

TEST_CASE("a heartbeat file that holds no record reads as none", "[heartbeat]") {
  ScratchDir dir;
  CHECK_FALSE(read_heartbeat_record(dir / "missing"));
  write_bytes(dir / "empty", "");  // what a PyTorch script's touch leaves
  CHECK_FALSE(read_heartbeat_record(dir / "empty"));
  write_bytes(dir / "text", std::string(200, 'x'));
  CHECK_FALSE(read_heartbeat_record(dir / "text"));

  Heartbeat beat(dir / "rank");
  const std::string good = read_bytes(dir / "rank");
  REQUIRE(good.size() == sizeof(HeartbeatRecord));
  write_bytes(dir / "short", good.substr(0, 64));
  CHECK_FALSE(read_heartbeat_record(dir / "short"));
  HeartbeatRecord other;
  std::memcpy(&other, good.data(), sizeof other);
  other.version = 0;
  write_bytes(dir / "version", std::string(reinterpret_cast<const char*>(&other), sizeof other));
  CHECK_FALSE(read_heartbeat_record(dir / "version"));
  // A writer stopped in the middle of an update (SIGSTOP) leaves an odd sequence: the record is
  // as good as it gets, and readers keep it.
  std::memcpy(&other, good.data(), sizeof other);
  other.sequence = 7;
  write_bytes(dir / "odd", std::string(reinterpret_cast<const char*>(&other), sizeof other));
  REQUIRE(read_heartbeat_record(dir / "odd"));
  // A later version appends fields: this reader takes the ones it knows.
  write_bytes(dir / "longer", good + std::string(64, '\0'));
  CHECK(read_heartbeat_record(dir / "longer"));
}

TEST_CASE("rank 0's record carries every rank's busy time of its last step", "[heartbeat]") {
  ScratchDir dir;
  Heartbeat rank0(dir / "rank-0.heartbeat");
  rank0.set_plan(100, 1, 2, 3);
  CHECK(read_bytes(dir / "rank-0.heartbeat").size() == sizeof(HeartbeatRecord) + 3 * sizeof(float));
  CHECK(read_rank_busy_times(dir / "rank-0.heartbeat")->last_step == 0);  // no step yet
  StepStats stats;
  stats.step = 5;
  stats.busy_ms = 6.0;
  stats.rank_busy_ms = {6.0, 11.5, 7.25};
  rank0.end_step(stats, 0, 0);
  rank0.set_comm_bucket(1);  // after the file grew: the communication thread's store lands in the mapping
  const auto busy = read_rank_busy_times(dir / "rank-0.heartbeat");
  REQUIRE(busy);
  CHECK(busy->last_step == 5);
  CHECK(busy->busy_ms == std::vector<float>{6.0f, 11.5f, 7.25f});
  const auto record = read_heartbeat_record(dir / "rank-0.heartbeat");
  REQUIRE(record);  // the record reads as before
  CHECK(record->rank_busy_count == 3);
  CHECK(record->busy_ms == 6.0f);
  CHECK(record->comm_bucket == 1);

  // The other ranks' records carry none; neither does a file cut short after the record.
  Heartbeat rank1(dir / "rank-1.heartbeat");
  rank1.set_plan(100, 1, 2);
  stats.rank_busy_ms.clear();
  rank1.end_step(stats, 0, 0);
  CHECK(read_heartbeat_record(dir / "rank-1.heartbeat")->rank_busy_count == 0);
  CHECK_FALSE(read_rank_busy_times(dir / "rank-1.heartbeat"));
  write_bytes(dir / "cut", read_bytes(dir / "rank-0.heartbeat").substr(0, sizeof(HeartbeatRecord) + 4));
  CHECK_FALSE(read_rank_busy_times(dir / "cut"));
}

TEST_CASE("phases read as sentences about one rank or several", "[heartbeat]") {
  HeartbeatRecord r{};
  r.step = 1042;
  r.n_layer = 12;
  r.micro_steps = 1;
  const auto says = [&](WorkerPhase p, int detail, bool plural = false) {
    r.phase = static_cast<std::uint16_t>(p);
    r.detail = detail;
    return describe_phase(r, plural);
  };
  CHECK(says(WorkerPhase::kBackward, 7) == "is in backward layer 7 of step 1042");
  CHECK(says(WorkerPhase::kBackward, 7, true) == "are in backward layer 7 of step 1042");
  CHECK(says(WorkerPhase::kForward, -1) == "is in forward (the embeddings) of step 1042");
  CHECK(says(WorkerPhase::kBackward, 12) == "is in backward (the output layer) of step 1042");
  r.comm_bucket = 7;
  CHECK(says(WorkerPhase::kGradientWait, -1, true) == "wait on all-reduce bucket 7 of step 1042");
  r.comm_bucket = 12;
  CHECK(says(WorkerPhase::kGradientWait, -1) == "waits on the embeddings' all-reduce bucket of step 1042");
  r.comm_bucket = -1;
  CHECK(says(WorkerPhase::kGradientWait, -1) == "waits for the gradient all-reduces of step 1042");
  CHECK(says(WorkerPhase::kStepSync, -1) == "waits in the end-of-step all-reduce of step 1042");
  CHECK(says(WorkerPhase::kCheckpoint, -1) == "is writing the checkpoint of step 1042");
  CHECK(says(WorkerPhase::kCheckpointWait, -1, true) == "wait for the checkpoint of step 1042 to be written");
  CHECK(says(WorkerPhase::kDone, -1, true) == "have finished training");
  CHECK(says(static_cast<WorkerPhase>(99), -1) == "is in phase_99");
  for (WorkerPhase p : {WorkerPhase::kConnecting, WorkerPhase::kGradientWait, WorkerPhase::kStepSync,
                        WorkerPhase::kCheckpointWait}) {
    r.phase = static_cast<std::uint16_t>(p);
    CHECK(waits_on_peers(r));
  }
  for (WorkerPhase p : {WorkerPhase::kData, WorkerPhase::kForward, WorkerPhase::kBackward, WorkerPhase::kOptimizer,
                        WorkerPhase::kCheckpoint}) {
    r.phase = static_cast<std::uint16_t>(p);
    CHECK_FALSE(waits_on_peers(r));
  }
}

TEST_CASE("SIGUSR2 makes each signalled thread append its own whole stack", "[heartbeat][backtrace]") {
  ScratchDir dir;
  const std::string path = dir / "rank-0.backtrace";
  install_backtrace_handler(path);
  std::atomic<bool> stop{false};
  std::atomic<long> helper_tid{0};
  std::thread helper([&] {
    helper_tid = ::syscall(SYS_gettid);
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  while (helper_tid == 0) std::this_thread::yield();
  const long self = ::syscall(SYS_gettid);
  ::syscall(SYS_tgkill, ::getpid(), helper_tid.load(), kBacktraceSignal);
  ::syscall(SYS_tgkill, ::getpid(), self, kBacktraceSignal);
  for (int i = 0; i < 500 && lines_of(read_bytes(path)).size() < 6; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  helper.join();
  std::signal(kBacktraceSignal, SIG_DFL);

  const std::vector<std::string> lines = lines_of(read_bytes(path));
  // Two blocks, each "thread T", its frames, "end of thread T", never interleaved.
  std::set<long> seen;
  long open = 0;
  for (const std::string& line : lines) {
    if (line.rfind("thread ", 0) == 0) {
      CHECK(open == 0);
      open = std::stol(line.substr(7));
    } else if (line.rfind("end of thread ", 0) == 0) {
      CHECK(std::stol(line.substr(14)) == open);
      seen.insert(open);
      open = 0;
    } else {
      CHECK(open != 0);
      CHECK(line.find("[0x") != std::string::npos);  // a frame: "binary(symbol+offset)[address]"
    }
  }
  CHECK(seen == std::set<long>{self, helper_tid.load()});
  CHECK(lines.size() >= 6);
}

TEST_CASE("a resumed run drops the metrics of the steps it repeats, and a torn last line", "[heartbeat][metrics]") {
  ScratchDir dir;
  const std::string path = dir / "metrics.jsonl";
  write_bytes(path, "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"val_loss\":4.5}\n"
                    "{\"step\":3,\"loss\":3}\n{\"step\":4,\"lo");
  drop_metrics_after(path, 2);
  CHECK(read_bytes(path) == "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"val_loss\":4.5}\n");
  drop_metrics_after(path, 2);  // nothing to drop: untouched
  CHECK(read_bytes(path) == "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":2,\"val_loss\":4.5}\n");
  drop_metrics_after(path, 0);
  CHECK(read_bytes(path).empty());
  drop_metrics_after(dir / "missing.jsonl", 0);
  CHECK_FALSE(std::ifstream(dir / "missing.jsonl"));
  // Longer than the 64 KiB read back at a time: the cut is found across blocks, the rest kept byte for byte.
  std::string records;
  for (int s = 1; s <= 8000; ++s) {
    records += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(s % 7) + "}\n";
  }
  REQUIRE(records.size() > 2 * 64 * 1024);
  write_bytes(path, records + "{\"step\":8001,\"lo");
  drop_metrics_after(path, 7000);
  CHECK(read_bytes(path) == records.substr(0, records.find("{\"step\":7001,")));
  drop_metrics_after(path, 10);
  CHECK(read_bytes(path) == records.substr(0, records.find("{\"step\":11,")));
}

TEST_CASE("fault injection reads its variables and refuses malformed ones", "[heartbeat][faults]") {
  struct Var {
    const char* name;
    const char* bad;
  };
  for (const Var& v : {Var{"XTRAIN_FAULT_KILL", "1"}, Var{"XTRAIN_FAULT_EXIT", "1:2:0"}, Var{"XTRAIN_FAULT_SLEEP", "1:2"},
                       Var{"XTRAIN_FAULT_SLOW", "1:0.5"}, Var{"XTRAIN_FAULT_FLIP", "1:-1"}}) {
    INFO(v.name);
    ::setenv(v.name, v.bad, 1);
    try {
      FaultInjection::from_environment(0);
      FAIL("no error");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).rfind(std::string(v.name) + ": expected ", 0) == 0);
    }
    ::unsetenv(v.name);
  }
  ::setenv("XTRAIN_FAULT_EXIT", "1:5:3:0.25", 1);
  const FaultInjection f = FaultInjection::from_environment(0);
  CHECK_NOTHROW(f.at_step_start(1, 4));
  CHECK_NOTHROW(f.at_step_start(0, 5));
  try {
    f.at_step_start(1, 5);
    FAIL("no exit");
  } catch (const FaultExit& e) {
    CHECK(e.code == 3);
    CHECK(e.linger_s == 0.25);
  }
  CHECK_NOTHROW(FaultInjection::from_environment(1).at_step_start(1, 5));  // a restarted attempt runs clean
  ::unsetenv("XTRAIN_FAULT_EXIT");
}
