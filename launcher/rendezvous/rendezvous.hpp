// Several nodes: how the xlaunch of each node meets the others through node 0's rendezvous store
// (common/store/kv_server.hpp), once per attempt, and how they stop together.
//
// Keys of attempt N live under "xlaunch/a<N>/", so a restart never reads an earlier round:
//   lease/<k>       node k's lease (common/store/kv_lease.hpp), taken before it registers and held until
//                   it has read the attempt's verdict: node 0's store reports its loss (below)
//   node/<k>        node k's registration: {"addr", "local_world_size", "pid"}
//   plan            node 0's answer: {"run_id", "world_size", "local_world_size", "master_addr",
//                   "master_port", "nccl_id"} or {"error": why}; every node starts its ranks from it
//                   (node k's ranks begin at k * local_world_size); its size does not grow with N
//   stop_count      ADD 1 by each node that stops the gang; the one that reads 1 is the root cause
//   stop/<k>        the root cause's record, set for every node k by the node that won stop_count;
//                   node k's watcher thread blocks in a GET on it (no polling)
//   done/<k>        node k's ranks are all reaped; its outcome
//   end             node 0's verdict on the attempt, once every node reported (or the time was up):
//                   {"silent": [nodes that never reported], "stop": the root cause's record or null}
//   left/<k>        node k has read the verdict (node 0 keeps the store up until then)
// The workers' own keys (Gloo's) are prefixed by XTRAIN_RUN_ID and never meet these.
//
// Liveness: every node but node 0 holds a lease on node 0's store for the whole attempt. When a
// lease is lost (the node's xlaunch died: its connection closed; or the link or the host froze: it
// fell silent for nodes.keepalive_timeout_s), node 0's store itself publishes that node's loss as
// the root cause (the same stop_count / stop/<k> path, so the first root cause still wins), and
// writes its done/<k> and left/<k> so that nobody waits for it. A node whose done/<k> is already
// there ended its attempt; its going is not a loss. A node that loses its lease (node 0 stopped
// answering) aborts its other connections to the store, which ends its watcher's GET: the same
// path as node 0's store closing.
//
// Every step costs O(1) requests per node and O(N) work at node 0 in all (the store wakes only
// the requests waiting for a key, and counts their missing keys down): node k never waits for the
// other nodes' keys, only for node 0's plan and verdict.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/store/kv_client.hpp"
#include "common/store/kv_lease.hpp"
#include "common/store/kv_server.hpp"
#include "launcher/plan/plan.hpp"

namespace xtrain::launcher {

// What a rendezvous round decided for this node.
struct RoundResult {
  std::string run_id;       // node 0's: every node's ranks share XTRAIN_RUN_ID (Gloo's key prefix)
  int world_size = 0;
  int rank_offset = 0;      // this node's first global rank
  std::string master_addr;  // node 0's address as the other nodes reach it
  int master_port = 0;
  std::string nccl_id_hex;  // empty unless the backend is NCCL
  std::string node_addr;    // this node's address as node 0 sees it: where its ranks listen
  std::string store_endpoint;
  std::string job_token;
};

class NodeLink {
 public:
  // Node 0 starts serving the store here (bind: the endpoint's host when it is a literal address,
  // else every interface), with room for every node's connections: the open-file limit is raised
  // as needed. Throws LaunchError (125) when it cannot listen, or when the hard open-file limit is
  // too low (naming both numbers).
  explicit NodeLink(const Plan& plan);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  const kv::Endpoint& endpoint() const { return endpoint_; }
  const std::string& token() const { return token_; }
  int node() const { return node_; }
  int nnodes() const { return nnodes_; }

  // The round of attempt `attempt` (1-based). Blocks up to rdzv_timeout_s; `cancel` (checked
  // at least once a second) abandons it. Node 0 publishes its `run_id` for every node. Every other
  // node takes its lease for the attempt first. Throws LaunchError (125) naming what is missing.
  RoundResult join(int attempt, const std::string& run_id, const std::atomic<bool>& cancel);

  // Tells every node to stop this attempt. Returns true when this node is the root cause (the
  // first to call it in this attempt); `record` is then what every node reads.
  bool publish_stop(int attempt, const nlohmann::json& record);

  // Blocks until a stop record for this node appears, or returns {"end": true} once
  // close_attempt() began; throws kv::KvError when the store goes away or stops answering this
  // node's keepalives (node 0 was lost). Uses its own connection: call from the watcher thread only.
  nlohmann::json wait_stop(int attempt);

  // End of an attempt on this node: releases this node's watcher, reports `outcome`, and returns
  // node 0's verdict: node 0 waits (up to `timeout_s`) for every node's report, the others for the
  // verdict (up to twice that). `final`: no restart follows, node 0 keeps the store until every
  // node has read the verdict. The lease ends once the verdict is read.
  struct Closing {
    std::optional<nlohmann::json> stop;  // the root cause's record
    std::vector<int> silent_nodes;       // nodes that did not report within the timeout
  };
  Closing close_attempt(int attempt, const nlohmann::json& outcome, bool final, double timeout_s);

 private:
  std::string key(int attempt, const std::string& name) const;
  kv::KvClient& control(const std::atomic<bool>* cancel);  // connects on first use
  nlohmann::json decide(kv::KvClient& client, int attempt, const std::string& run_id,
                        std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& cancel);
  void take_lease(int attempt);
  void lose_store(const std::string& why);  // node 0 stopped answering: fail every call to it
  void release_watcher(int attempt);
  Closing exchange_outcomes(kv::KvClient& client, int attempt, const nlohmann::json& outcome, bool final,
                            double timeout_s);
  void on_lease_lost(kv::StoreEditor& store, const kv::LeaseLoss& loss) const;  // node 0's store thread

  int node_;
  int nnodes_;
  int local_world_size_;
  double timeout_s_;
  std::string backend_;
  kv::Endpoint endpoint_;
  std::string token_;
  kv::KvLeaseOptions keepalive_;
  std::unique_ptr<kv::KvServerThread> server_;  // node 0 only
  std::unique_ptr<kv::KvClient> control_;       // the supervisor's calls
  std::unique_ptr<kv::KvLease> lease_;          // nodes other than 0, during an attempt
  std::string node_addr_;                       // control_'s local address

  std::mutex watch_mutex_;                  // the watcher thread against close_attempt and the lease
  std::shared_ptr<kv::KvClient> watcher_;   // the watcher thread's blocking GET
  int watch_released_ = 0;                  // close_attempt() began for attempts up to this one
  std::string store_lost_;                  // why node 0 is lost (the lease's verdict); empty: fine
};

}  // namespace xtrain::launcher
