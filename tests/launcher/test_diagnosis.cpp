// What the supervisor concludes from progress records and /proc: the hang report's sentence and
// the process checks behind it (the straggler detector: test_stragglers.cpp).
#include <catch2/catch.hpp>

#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "launcher/agent/hang_report.hpp"
#include "launcher/process/proc_info.hpp"

using namespace xtrain;
using namespace xtrain::launcher;

namespace {

HeartbeatRecord at(std::int64_t step, WorkerPhase phase, int detail = -1, int bucket = -1) {
  HeartbeatRecord r{};
  r.step = step;
  r.n_layer = 12;
  r.micro_steps = 1;
  r.phase = static_cast<std::uint16_t>(phase);
  r.detail = detail;
  r.comm_bucket = bucket;
  return r;
}

RankSnapshot rank(int id, std::optional<HeartbeatRecord> record, char state = 'S') {
  RankSnapshot r;
  r.rank = id;
  r.pid = 1000 + id;
  r.record = record;
  r.state = state;
  return r;
}

}  // namespace

TEST_CASE("launcher/hang report: rank lists read as people write them", "[diagnosis]") {
  CHECK(rank_list({3}) == "rank 3");
  CHECK(rank_list({1, 3}) == "ranks 1 and 3");
  CHECK(rank_list({0, 1, 2, 4, 5, 6, 7}) == "ranks 0-2 and 4-7");
  CHECK(rank_list({0, 2, 5, 6}) == "ranks 0, 2 and 5-6");
}

TEST_CASE("launcher/hang report: the rank in backward is named, the waiting ranks grouped", "[diagnosis]") {
  std::vector<RankSnapshot> ranks;
  for (int r = 0; r < 8; ++r) {
    ranks.push_back(rank(r, r == 3 ? at(1042, WorkerPhase::kBackward, 7) : at(1042, WorkerPhase::kGradientWait, -1, 7)));
  }
  CHECK(ranks_behind(ranks) == std::vector<int>{3});
  CHECK(summarize(ranks) ==
        "rank 3 is in backward layer 7 of step 1042; ranks 0-2 and 4-7 wait on all-reduce bucket 7 of step 1042");

  SECTION("a stopped rank is behind whatever its record says") {
    ranks[5].state = 'T';
    ranks[5].record = at(1042, WorkerPhase::kGradientWait, -1, 7);
    ranks[3].record = at(1042, WorkerPhase::kGradientWait, -1, 7);
    CHECK(ranks_behind(ranks) == std::vector<int>{5});
    CHECK(summarize(ranks) == "rank 5 is stopped (SIGSTOP): it waits on all-reduce bucket 7 of step 1042; "
                              "ranks 0-4 and 6-7 wait on all-reduce bucket 7 of step 1042");
  }
  SECTION("of several working ranks, the earliest is behind") {
    ranks[6].record = at(1042, WorkerPhase::kBackward, 5);
    CHECK(ranks_behind(ranks) == std::vector<int>{3});  // backward reaches layer 5 after layer 7
    ranks[6].record = at(1042, WorkerPhase::kBackward, 9);
    CHECK(ranks_behind(ranks) == std::vector<int>{6});
    ranks[6].record = at(1042, WorkerPhase::kForward, 2);
    CHECK(ranks_behind(ranks) == std::vector<int>{6});
  }
  SECTION("when nobody waits, nobody is singled out") {
    for (RankSnapshot& r : ranks) r.record = at(1042, WorkerPhase::kOptimizer);
    CHECK(ranks_behind(ranks).empty());
    CHECK(summarize(ranks) == "ranks 0-7 are in the optimizer update of step 1042");
  }
}

TEST_CASE("launcher/hang report: ranks without a record are described by /proc and their heartbeat", "[diagnosis]") {
  std::vector<RankSnapshot> ranks = {rank(0, std::nullopt), rank(1, std::nullopt, 'T'), rank(2, std::nullopt, '?')};
  ranks[0].heartbeat_age_s = 5.25;
  CHECK(ranks_behind(ranks) == std::vector<int>{1});
  CHECK(summarize(ranks) == "rank 1 is stopped (SIGSTOP); rank 0 is sleeping, last heartbeat 5.2 s ago; "
                            "rank 2 has exited");
}

TEST_CASE("launcher/hang report: backtrace lines get their C++ names back", "[diagnosis]") {
  CHECK(demangle_frame("/bin/w(_ZN6xtrain3GPT8backwardEf+0x1a4)[0x55d0]") == "/bin/w(xtrain::GPT::backward(float)+0x1a4)[0x55d0]");
  CHECK(demangle_frame("/lib/libc.so.6(+0x85f16)[0x7f3a]") == "/lib/libc.so.6(+0x85f16)[0x7f3a]");
  CHECK(demangle_frame("/lib/libc.so.6(epoll_wait+0x56)[0x7f3a]") == "/lib/libc.so.6(epoll_wait+0x56)[0x7f3a]");
  CHECK(demangle_frame("[0x7f3a]") == "[0x7f3a]");
}

TEST_CASE("launcher/proc: state letters and start times tell a process from a reused pid", "[diagnosis]") {
  const auto self = read_proc_stat(::getpid());
  REQUIRE(self);
  CHECK(self->state == 'R');
  CHECK(self->start_time > 0);
  CHECK(process_alive(::getpid(), self->start_time));
  CHECK(process_alive(::getpid(), 0));
  CHECK_FALSE(process_alive(::getpid(), self->start_time + 1));  // the same pid, another process
  CHECK(read_threads(::getpid()).front().tid == ::getpid());

  const pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  ::kill(child, SIGSTOP);
  std::optional<ProcStat> stat;
  for (int i = 0; i < 500 && (!stat || stat->state != 'T'); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    stat = read_proc_stat(child);
  }
  REQUIRE(stat);
  CHECK(stat->state == 'T');
  CHECK(describe_state('T') == "stopped (SIGSTOP)");
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(read_proc_stat(child));
  CHECK_FALSE(process_alive(child, stat->start_time));
}
