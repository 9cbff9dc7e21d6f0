// Several nodes: how the xlaunch of each node meets the others through node 0's rendezvous store
// (common/kv_server.hpp), once per attempt, and how they stop together.
//
// Keys of attempt N live under "xlaunch/a<N>/", so a restart never reads an earlier round:
//   node/<k>        node k's registration: {"addr", "local_world_size", "pid"}
//   plan            node 0's answer: {"run_id", "world_size", "offsets", "master_addr", "master_port",
//                   "nccl_id"} or {"error": why}; every node starts its ranks from it
//   stop_count      ADD 1 by each node that stops the gang; the one that reads 1 is the root cause
//   stop/<k>        the root cause's record, set for every node k by the node that won stop_count;
//                   node k's watcher thread blocks in a GET on it (no polling); a node sets its own
//                   key at the end of the attempt to release its watcher
//   done/<k>        node k's ranks are all reaped; its outcome
//   left/<k>        node k has read everything it needs (node 0 keeps the store up until then)
// The workers' own keys (Gloo's) are prefixed by XTRAIN_RUN_ID and never meet these.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/kv_client.hpp"
#include "common/kv_server.hpp"
#include "launcher/plan.hpp"

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
  // else every interface). Throws LaunchError (125) when it cannot listen.
  explicit NodeLink(const Plan& plan);
  ~NodeLink();
  NodeLink(const NodeLink&) = delete;
  NodeLink& operator=(const NodeLink&) = delete;

  const kv::Endpoint& endpoint() const { return endpoint_; }
  const std::string& token() const { return token_; }
  int node() const { return node_; }
  int nnodes() const { return nnodes_; }

  // The round of attempt `attempt` (1-based). Blocks up to rdzv_timeout_s; `cancel` (checked
  // at least once a second) abandons it. Node 0 publishes its `run_id` for every node. Throws
  // LaunchError (125) naming what is missing.
  RoundResult join(int attempt, const std::string& run_id, const std::atomic<bool>& cancel);

  // Tells every node to stop this attempt. Returns true when this node is the root cause (the
  // first to call it in this attempt); `record` is then what every node reads.
  bool publish_stop(int attempt, const nlohmann::json& record);

  // Blocks until a stop record for this node appears; throws kv::KvError when the store goes
  // away (node 0 was lost). Uses its own connection: call from the watcher thread only.
  nlohmann::json wait_stop(int attempt);

  // End of an attempt on this node: reports `outcome`, waits (up to `timeout_s`) for every node's
  // report, releases this node's watcher, and returns the stop record if some node published
  // one. `final`: no restart follows, node 0 keeps the store until every node has read.
  struct Closing {
    std::optional<nlohmann::json> stop;  // the root cause's record
    std::vector<int> silent_nodes;       // nodes that did not report within the timeout
  };
  Closing close_attempt(int attempt, const nlohmann::json& outcome, bool final, double timeout_s);

 private:
  std::string key(int attempt, const std::string& name) const;
  kv::KvClient& control(const std::atomic<bool>* cancel);  // connects on first use

  int node_;
  int nnodes_;
  int local_world_size_;
  double timeout_s_;
  std::string backend_;
  kv::Endpoint endpoint_;
  std::string token_;
  std::unique_ptr<kv::KvServerThread> server_;  // node 0 only
  std::unique_ptr<kv::KvClient> control_;       // the supervisor's calls
  std::unique_ptr<kv::KvClient> watcher_;       // the watcher thread's blocking GET
  std::string node_addr_;                       // control_'s local address
};

}  // namespace xtrain::launcher
