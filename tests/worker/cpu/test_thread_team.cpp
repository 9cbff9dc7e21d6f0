// The thread team of the generate decoder and the CPU backend: every member runs once per run, the
// caller as member 0, and what the members wrote is visible when run returns, whether the helpers
// were still polling or had gone to sleep; the shares of a count cover it once, in member order;
// split's parts cover a range once, aligned, and small ranges stay on the calling thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "worker/cpu/thread_team.hpp"

using namespace xtrain;

TEST_CASE("A thread team runs every member once a run, the caller as member 0", "[team]") {
  for (const int members : {1, 2, 3, 5}) {
    INFO(members << " members");
    ThreadTeam team(members);
    REQUIRE(team.members() == members);
    // Plain ints, one per member: run's start and end must order the writes, not atomics.
    std::vector<long> runs_seen(static_cast<size_t>(members), 0);
    std::vector<std::thread::id> ran_on(static_cast<size_t>(members));
    std::vector<int> counts_told(static_cast<size_t>(members), 0);  // Catch's checks are for this thread only
    const int kRuns = 2000;
    for (int r = 0; r < kRuns; ++r) {
      team.run([&](int member, int count) {
        counts_told[static_cast<size_t>(member)] = count;
        runs_seen[static_cast<size_t>(member)] += 1;
        ran_on[static_cast<size_t>(member)] = std::this_thread::get_id();
      });
      // After a pause longer than a helper polls, the next run must wake them from sleep.
      if (r % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int m = 0; m < members; ++m) {
      CHECK(runs_seen[static_cast<size_t>(m)] == kRuns);
      CHECK(counts_told[static_cast<size_t>(m)] == members);
    }
    CHECK(ran_on[0] == std::this_thread::get_id());
    for (int m = 1; m < members; ++m) {
      CHECK(ran_on[static_cast<size_t>(m)] != std::this_thread::get_id());
      for (int k = 1; k < m; ++k) CHECK(ran_on[static_cast<size_t>(m)] != ran_on[static_cast<size_t>(k)]);
    }
  }
}

TEST_CASE("A run's work is all done when it returns: members' sums of a shared array", "[team]") {
  ThreadTeam team(4);
  std::vector<double> values(10007);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  std::vector<double> parts(4);
  for (int round = 0; round < 200; ++round) {
    for (double& v : values) v += 1.0;  // written by the caller between runs, read by every member
    team.run([&](int member, int members) {
      const TeamShare s = team_share(static_cast<int>(values.size()), member, members);
      double sum = 0.0;
      for (int i = s.first; i < s.last; ++i) sum += values[static_cast<size_t>(i)];
      parts[static_cast<size_t>(member)] = sum;
    });
    const double n = static_cast<double>(values.size());
    CHECK(parts[0] + parts[1] + parts[2] + parts[3] == n * (n - 1) / 2 + n * (round + 1));
  }
}

TEST_CASE("Team shares cover a count once, contiguous, in member order, sizes within one", "[team]") {
  for (const int count : {0, 1, 3, 4, 12, 50304}) {
    for (const int members : {1, 2, 3, 5, 8}) {
      INFO(count << " items, " << members << " members");
      int next = 0, smallest = count, largest = 0;
      for (int m = 0; m < members; ++m) {
        const TeamShare s = team_share(count, m, members);
        CHECK(s.first == next);
        CHECK(s.last >= s.first);
        smallest = std::min(smallest, s.last - s.first);
        largest = std::max(largest, s.last - s.first);
        next = s.last;
      }
      CHECK(next == count);
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST_CASE("A team of no members is refused", "[team]") {
  CHECK_THROWS_AS(ThreadTeam(0), std::invalid_argument);
  CHECK_THROWS_AS(ThreadTeam(-2), std::invalid_argument);
}

TEST_CASE("split covers a range once in aligned parts, one per member at most", "[team]") {
  struct Part {
    size_t first, last;
    std::thread::id on;
  };
  for (const int members : {1, 2, 3, 5}) {
    ThreadTeam team(members);
    for (const size_t count : {size_t{0}, size_t{1}, size_t{99}, size_t{1000}, size_t{4097}, size_t{100003}}) {
      for (const size_t grain : {size_t{1}, size_t{16}, size_t{1000}}) {
        for (const size_t align : {size_t{1}, size_t{16}}) {
          INFO(members << " members, count " << count << ", grain " << grain << ", align " << align);
          std::mutex m;
          std::vector<Part> parts;
          team.split(count, grain, align, [&](size_t first, size_t last) {
            const std::lock_guard<std::mutex> lock(m);
            parts.push_back({first, last, std::this_thread::get_id()});
          });
          std::sort(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
            return a.first != b.first ? a.first < b.first : a.last < b.last;
          });
          size_t next = 0;
          for (const Part& p : parts) {
            CHECK(p.first == next);
            CHECK(p.last >= p.first);
            if (p.first != 0) CHECK(p.first % align == 0);
            next = p.last;
          }
          CHECK(next == count);
          const size_t expected = std::clamp<size_t>(count / grain, 1, static_cast<size_t>(members));
          CHECK(parts.size() == expected);
          // Fewer items than two grains: one part, on the calling thread.
          if (count < 2 * grain) CHECK((parts.size() == 1 && parts[0].on == std::this_thread::get_id()));
        }
      }
    }
  }
}
