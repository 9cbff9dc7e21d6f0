// The rendezvous round (launcher/rendezvous/rendezvous.hpp) in one process, nodes as threads on 127.0.0.1:
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
#include "common/store/kv_client.hpp"
#include "launcher/rendezvous/rendezvous.hpp"
#include "launcher/run/launch_error.hpp"

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

// Node 0 and node 1 meet for `attempt`, node 1 on a thread of its own.
void meet(NodeLink& node0, NodeLink& node1, int attempt) {
  std::atomic<bool> cancel{false};
  auto round1 = std::async(std::launch::async, [&] { return node1.join(attempt, "run", cancel); });
  node0.join(attempt, "run", cancel);
  round1.get();
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

TEST_CASE("rendezvous: a node that arrives after several of node 0's waiting slices still meets", "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 2, port));
  std::atomic<bool> cancel{false};
  auto node1 = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // node 0 waits in 500 ms slices
    NodeLink link(node_plan(1, 2, port));
    return link.join(1, "run", cancel);
  });
  CHECK(node0.join(1, "run", cancel).world_size == 4);
  CHECK(node1.get().rank_offset == 2);
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
  meet(node0, node1, 1);
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
  meet(node0, node1, 2);
  auto watch = std::async(std::launch::async, [&] { return node1.wait_stop(2); });
  auto close0 = std::async(std::launch::async, [&] { return node0.close_attempt(2, {{"status", "succeeded"}}, true, 5); });
  const NodeLink::Closing quiet = node1.close_attempt(2, {{"status", "succeeded"}}, true, 5);
  CHECK_FALSE(quiet.stop);
  CHECK(watch.get().contains("end"));
  CHECK_FALSE(close0.get().stop);
}

namespace {

// Node `node` of attempt 1 as its xlaunch speaks to the store, by hand, so that the test can kill
// it: the lease, the registration, the plan.
struct HandNode {
  HandNode(int port, int node)
      : lease(kv::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)}, "test-token"),
        control(kv::Endpoint{"127.0.0.1", static_cast<std::uint16_t>(port)}, "test-token") {
    lease.lease("xlaunch/a1/lease/" + std::to_string(node), R"({"node":)" + std::to_string(node) + R"(,"attempt":1})",
                std::chrono::seconds(3));
    control.set("xlaunch/a1/node/" + std::to_string(node), R"({"addr":"127.0.0.1","local_world_size":2,"pid":1})");
  }
  kv::KvClient lease;
  kv::KvClient control;
};

}  // namespace

TEST_CASE("rendezvous: a node lost mid-attempt is every node's root cause, and nobody waits for it",
          "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 3, port));
  NodeLink node1(node_plan(1, 3, port));
  auto node2 = std::make_unique<HandNode>(port, 2);
  meet(node0, node1, 1);
  auto watch0 = std::async(std::launch::async, [&] { return node0.wait_stop(1); });
  auto watch1 = std::async(std::launch::async, [&] { return node1.wait_stop(1); });
  CHECK(watch0.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);

  const auto lost_at = std::chrono::steady_clock::now();
  node2.reset();  // its connections close without RELEASE, as when its xlaunch is killed
  for (auto* watch : {&watch0, &watch1}) {
    const nlohmann::json record = watch->get();
    CHECK(record.at("node") == 2);
    CHECK(record.at("outcome").at("status") == "node_lost");
    CHECK(record.at("outcome").at("exit_code") == exit_code::kLaunchFailure);
    CHECK_THAT(record.at("outcome").at("reason").get<std::string>(),
               Contains("its xlaunch is lost (127.0.0.1:") && Contains("the connection closed"));
    CHECK(record.at("root_cause").at("kind") == "node_lost");
    CHECK(record.at("root_cause").at("node") == 2);
    CHECK(record.at("restart") == false);
  }
  CHECK(std::chrono::steady_clock::now() - lost_at < std::chrono::seconds(2));

  // The end of the attempt: node 0 has node 2's report from its store, so neither node waits
  // out the 30 s it would give a silent node.
  const auto closing_from = std::chrono::steady_clock::now();
  auto close1 = std::async(std::launch::async, [&] { return node1.close_attempt(1, {{"status", "node_lost"}}, true, 30); });
  const NodeLink::Closing closing0 = node0.close_attempt(1, {{"status", "node_lost"}}, true, 30);
  const NodeLink::Closing closing1 = close1.get();
  CHECK(std::chrono::steady_clock::now() - closing_from < std::chrono::seconds(5));
  for (const auto* closing : {&closing0, &closing1}) {
    CHECK(closing->silent_nodes.empty());
    REQUIRE(closing->stop);
    CHECK(closing->stop->at("node") == 2);
  }
}

TEST_CASE("rendezvous: a node that goes after reporting its end is not lost", "[rendezvous]") {
  const int port = free_port();
  NodeLink node0(node_plan(0, 2, port));
  std::atomic<bool> cancel{false};
  auto node1 = std::make_unique<HandNode>(port, 1);
  node0.join(1, "run", cancel);
  node1->control.set("xlaunch/a1/done/1", R"({"status":"succeeded"})");
  node1.reset();  // gone without RELEASE and without waiting for the verdict
  const auto closing_from = std::chrono::steady_clock::now();
  const NodeLink::Closing closing = node0.close_attempt(1, {{"status", "succeeded"}}, true, 30);
  CHECK(std::chrono::steady_clock::now() - closing_from < std::chrono::seconds(5));  // left/1 was written for it
  CHECK_FALSE(closing.stop);
  CHECK(closing.silent_nodes.empty());
}
