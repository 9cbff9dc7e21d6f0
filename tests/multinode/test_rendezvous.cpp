// The rendezvous round (launcher/rendezvous.hpp) in one process, nodes as threads on 127.0.0.1:
// placement, a shared run id, a node that never arrives, and the stop protocol's one winner.
#include <catch2/catch.hpp>

#include <atomic>
#include <future>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/exit_codes.hpp"
#include "launcher/launch_error.hpp"
#include "launcher/rendezvous.hpp"

using namespace xtrain;
using namespace xtrain::launcher;
using Catch::Matchers::Contains;

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

Plan node_plan(int node, int nnodes, int port, int nproc = 2, double timeout_s = 5) {
  Plan plan;
  plan.spec.nodes.nnodes = nnodes;
  plan.spec.nodes.node_rank = node;
  plan.spec.nodes.rdzv_endpoint = "127.0.0.1:" + std::to_string(port);
  plan.spec.nodes.rdzv_timeout_s = timeout_s;
  plan.backend = "gloo";
  plan.job_token = "test-token";
  for (int local = 0; local < nproc; ++local) plan.ranks.push_back({node * nproc + local, local, nnodes * nproc, nproc, node});
  return plan;
}

}  // namespace

TEST_CASE("rendezvous: three nodes agree on offsets, node 0's run id and master port", "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 3, port));
  std::atomic<bool> cancel{false};
  auto join = [&](int node) {
    return std::async(std::launch::async, [&, node] {
      NodeLink link(node_plan(node, 3, port));
      return link.join(1, "run-of-node-" + std::to_string(node), cancel);
    });
  };
  auto node2 = join(2);
  auto node1 = join(1);
  const RoundResult r0 = node0.join(1, "run-of-node-0", cancel);
  const RoundResult r1 = node1.get();
  const RoundResult r2 = node2.get();
  CHECK(r0.world_size == 6);
  CHECK(r0.rank_offset == 0);
  CHECK(r1.rank_offset == 2);
  CHECK(r2.rank_offset == 4);
  for (const RoundResult* r : {&r0, &r1, &r2}) {
    CHECK(r->run_id == "run-of-node-0");
    CHECK(r->master_addr == "127.0.0.1");
    CHECK(r->master_port == r0.master_port);
    CHECK(r->node_addr == "127.0.0.1");
    CHECK(r->store_endpoint == "127.0.0.1:" + std::to_string(port));
    CHECK(r->nccl_id_hex.empty());
  }
}

TEST_CASE("rendezvous: a node that never arrives fails the round on every node, named", "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 3, port, 2, 1.0));
  std::atomic<bool> cancel{false};
  auto node1 = std::async(std::launch::async, [&] {
    NodeLink link(node_plan(1, 3, port, 2, 1.0));
    link.join(1, "run", cancel);
  });
  const auto started = std::chrono::steady_clock::now();
  try {
    node0.join(1, "run", cancel);
    FAIL("node 0's round succeeded without node 2");
  } catch (const LaunchError& e) {
    CHECK(e.exit_code() == exit_code::kLaunchFailure);
    CHECK_THAT(e.what(), Contains("1 of 3 nodes never arrived within nodes.rdzv_timeout_s = 1 s: node 2"));
  }
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(3));
  CHECK_THROWS_WITH(node1.get(), Contains("node 2"));  // node 1 learns the same reason from node 0
}

TEST_CASE("rendezvous: different rank counts per node are refused with the counts", "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 2, port, 2));
  std::atomic<bool> cancel{false};
  auto node1 = std::async(std::launch::async, [&] {
    NodeLink link(node_plan(1, 2, port, 3));
    link.join(1, "run", cancel);
  });
  CHECK_THROWS_WITH(node0.join(1, "run", cancel), Contains("node 0 has 2, node 1 has 3 ranks"));
  CHECK_THROWS_WITH(node1.get(), Contains("node 1 has 3 ranks"));
}

TEST_CASE("rendezvous: a cancelled round ends within a second", "[rendezvous]") {
  const int port = free_port();
  NodeLink node1(node_plan(1, 2, port, 2, 30));  // node 0 never comes
  std::atomic<bool> cancel{false};
  auto round = std::async(std::launch::async, [&] { node1.join(1, "run", cancel); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto started = std::chrono::steady_clock::now();
  cancel = true;
  CHECK_THROWS_WITH(round.get(), Contains("abandoned"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::milliseconds(1500));
}

TEST_CASE("rendezvous: the first stop wins and reaches every node's watcher, and the end releases them",
          "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 2, port));
  NodeLink node1(node_plan(1, 2, port));
  std::atomic<bool> cancel{false};
  auto round1 = std::async(std::launch::async, [&] { return node1.join(1, "run", cancel); });
  node0.join(1, "run", cancel);
  round1.get();
  auto watch0 = std::async(std::launch::async, [&] { return node0.wait_stop(1); });
  auto watch1 = std::async(std::launch::async, [&] { return node1.wait_stop(1); });
  CHECK(node1.publish_stop(1, {{"node", 1}, {"why", "rank 3 failed"}}));
  CHECK_FALSE(node0.publish_stop(1, {{"node", 0}, {"why", "rank 0 failed too, later"}}));
  CHECK(watch0.get().at("why") == "rank 3 failed");
  CHECK(watch1.get().at("why") == "rank 3 failed");
  auto close1 = std::async(std::launch::async, [&] { return node1.close_attempt(1, {{"status", "failed"}}, true, 5); });
  const NodeLink::Closing closing0 = node0.close_attempt(1, {{"status", "failed"}}, true, 5);
  const NodeLink::Closing closing1 = close1.get();
  REQUIRE(closing0.stop);
  CHECK(closing0.stop->at("node") == 1);
  CHECK(closing1.stop->at("node") == 1);
  CHECK(closing0.silent_nodes.empty());

  // Attempt 2: nobody fails; closing releases each node's own watcher.
  auto round2 = std::async(std::launch::async, [&] { return node1.join(2, "run", cancel); });
  node0.join(2, "run", cancel);
  round2.get();
  auto watch = std::async(std::launch::async, [&] { return node1.wait_stop(2); });
  auto close0 = std::async(std::launch::async, [&] { return node0.close_attempt(2, {{"status", "succeeded"}}, true, 5); });
  const NodeLink::Closing quiet = node1.close_attempt(2, {{"status", "succeeded"}}, true, 5);
  CHECK_FALSE(quiet.stop);
  CHECK(watch.get().contains("end"));
  CHECK_FALSE(close0.get().stop);
}
