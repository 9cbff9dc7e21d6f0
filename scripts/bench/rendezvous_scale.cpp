// Rendezvous at scale, simulated: many nodes meet at node 0's store on loopback through xlaunch's
// own code (launcher/rendezvous/rendezvous.hpp's NodeLink: its store, lease, watcher and end exchange), one
// attempt, then leave. scripts/bench/rendezvous_scale.py drives it and prints the table.
//
//   xtrain-bench-rdzv node0 --nodes N --port P [--ranks-per-node R] [--backend nccl|gloo]
//   xtrain-bench-rdzv nodes --nodes N --port P --first K --count C [--ranks-per-node R] [--backend B]
//
// "node0" is node 0 (the store and node 0's own part); "nodes" simulates nodes K..K+C-1, each on
// its own thread with its own NodeLink (its own connections, job token, node rank and rank count)
// and, as xlaunch has, a watcher thread blocked on its stop key once the round met. Lines on
// stdin and stdout pace the processes together:
//   -> ready                  every NodeLink exists (node 0's store listens); nothing connected yet
//   <- meet                   every node joins attempt 1 (connect, lease, register, read the plan)
//   -> met T FAILED [ERROR]   T: CLOCK_MONOTONIC ns when this process's last join returned
//   <- end                    every node runs the end-of-attempt exchange (final) and leaves
//   -> ended T FAILED [ERROR]
//   -> rss PEAK BEFORE        node 0 only: VmHWM at the end and VmRSS before "meet", in KiB
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/log.hpp"
#include "common/open_files.hpp"
#include "launcher/rendezvous/rendezvous.hpp"

using namespace xtrain;
using namespace xtrain::launcher;

namespace {

struct Options {
  std::string role;
  int nodes = 0;
  int port = 0;
  int first = 0;
  int count = 1;
  int ranks_per_node = 8;
  std::string backend = "nccl";
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "xtrain-bench-rdzv: %s\nusage: xtrain-bench-rdzv node0|nodes --nodes N --port P [--first K --count C] "
               "[--ranks-per-node R] [--backend nccl|gloo]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) usage("no role");
  o.role = argv[1];
  if (o.role != "node0" && o.role != "nodes") usage("unknown role " + o.role);
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--backend") {
      o.backend = value;
      continue;
    }
    const int n = std::atoi(value.c_str());
    if (flag == "--nodes") o.nodes = n;
    else if (flag == "--port") o.port = n;
    else if (flag == "--first") o.first = n;
    else if (flag == "--count") o.count = n;
    else if (flag == "--ranks-per-node") o.ranks_per_node = n;
    else usage("unknown flag " + flag);
  }
  if (o.nodes < 2 || o.port <= 0 || o.count < 1 || o.ranks_per_node < 1) usage("bad --nodes, --port, --count or --ranks-per-node");
  if (o.backend != "nccl" && o.backend != "gloo") usage("--backend: expected nccl or gloo");
  if (o.role == "node0") o.first = 0, o.count = 1;
  if (o.first < 0 || o.first + o.count > o.nodes || (o.role == "nodes" && o.first == 0)) usage("bad --first/--count");
  return o;
}

Plan node_plan(const Options& o, int node) {
  Plan plan;
  plan.spec.nodes.nnodes = o.nodes;
  plan.spec.nodes.node_rank = node;
  plan.spec.nodes.rdzv_endpoint = "127.0.0.1:" + std::to_string(o.port);
  plan.spec.nodes.rdzv_timeout_s = 120;
  plan.backend = o.backend;
  plan.job_token = "bench-token";
  const int world = o.nodes * o.ranks_per_node;
  for (int local = 0; local < o.ranks_per_node; ++local) {
    plan.ranks.push_back({node * o.ranks_per_node + local, local, world, o.ranks_per_node, node});
  }
  return plan;
}

long status_kib(const char* field) {  // a "VmXXX:" line of /proc/self/status
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
  }
  return -1;
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void expect_line(const std::string& word) {
  std::string line;
  if (!std::getline(std::cin, line) || line != word) {
    std::fprintf(stderr, "xtrain-bench-rdzv: expected \"%s\" on stdin, got \"%s\"\n", word.c_str(), line.c_str());
    std::exit(2);
  }
}

// One phase's result in this process: the last node's time, and the failures.
class Phase {
 public:
  void done(std::int64_t at) {
    std::lock_guard lock(mutex_);
    last_ = std::max(last_, at);
  }
  void failed(const std::string& why) {
    std::lock_guard lock(mutex_);
    if (failures_++ == 0) first_error_ = why;
  }
  void report(const char* word) {
    std::lock_guard lock(mutex_);
    std::printf("%s %lld %d %s\n", word, static_cast<long long>(last_), failures_, first_error_.c_str());
    std::fflush(stdout);
  }

 private:
  std::mutex mutex_;
  std::int64_t last_ = 0;
  int failures_ = 0;
  std::string first_error_;
};

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  // Warnings only (one "met" line per node would swamp it), on stderr: stdout speaks to the driver.
  init_logging("bench", "", /*quiet=*/true);
  if (o.role == "nodes") {
    try {  // each simulated node holds 3 connections: control, lease, watcher
      reserve_open_files(3 * static_cast<std::size_t>(o.count) + 64,
                         "xtrain-bench-rdzv (" + std::to_string(o.count) + " simulated nodes)");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "xtrain-bench-rdzv: %s\n", e.what());
      return 1;
    }
  }
  std::vector<std::unique_ptr<NodeLink>> links;
  try {
    for (int k = o.first; k < o.first + o.count; ++k) links.push_back(std::make_unique<NodeLink>(node_plan(o, k)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xtrain-bench-rdzv: %s\n", e.what());
    return 1;
  }
  std::promise<void> meet, end;
  const std::shared_future<void> meet_go = meet.get_future().share(), end_go = end.get_future().share();
  std::atomic<bool> cancel{false};
  std::atomic<int> joined{0};
  std::promise<void> all_joined;
  Phase met, ended;
  std::vector<std::thread> threads;
  for (auto& owned : links) {
    threads.emplace_back([&, link = owned.get()] {
      meet_go.wait();
      std::thread watcher;
      try {
        link->join(1, "bench", cancel);
        met.done(now_ns());
        watcher = std::thread([link] {
          try {
            link->wait_stop(1);  // returns {"end": true} once the end exchange begins
          } catch (const std::exception&) {
          }
        });
      } catch (const std::exception& e) {
        met.failed(e.what());
      }
      if (++joined == o.count) all_joined.set_value();
      end_go.wait();
      if (watcher.joinable()) {
        try {
          link->close_attempt(1, {{"status", "succeeded"}}, true, 60);
          ended.done(now_ns());
        } catch (const std::exception& e) {
          ended.failed(e.what());
        }
        watcher.join();
      }
    });
  }
  const long rss_before = status_kib("VmRSS:");
  std::printf("ready\n");
  std::fflush(stdout);
  expect_line("meet");
  meet.set_value();
  all_joined.get_future().wait();
  met.report("met");
  expect_line("end");
  end.set_value();
  for (auto& t : threads) t.join();
  ended.report("ended");
  if (o.role == "node0") std::printf("rss %ld %ld\n", status_kib("VmHWM:"), rss_before);
  std::fflush(stdout);
  links.clear();
  return 0;
}
