// The CPU ranks' collectives, over Gloo's TCP transport.
//
// Rendezvous goes through a gloo store every rank can reach: a FileStore in the run directory on
// one node, node 0's key-value store (worker/comm/gloo_kv_store.hpp) across nodes. Keys are prefixed
// by a run id that is unique per run and restart attempt, so concurrent runs and restarts never
// read each other's addresses. All collectives run on one communication thread, in the order
// they were issued: gradient buckets queue behind each other while the caller keeps computing
// (the overlap with backward), and blocking collectives queue behind them, so every rank issues
// the same sequence of Gloo operations with the same tags.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/worker_env.hpp"
#include "worker/comm/communicator.hpp"

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
}  // namespace gloo

namespace xtrain {

struct GlooOptions {
  std::string prefix;                    // store key prefix: unique per run and attempt
  std::string store_name;                // the store, for messages: a directory or host:port
  std::string hostname = "127.0.0.1";    // address this rank listens on (empty: use iface)
  std::string iface;                     // network interface, used when hostname is empty
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  // Each collective's limit (communicator.hpp); a dead peer fails fast anyway (its sockets
  // close), and a hung one is the launcher's heartbeat watchdog's job too.
  std::chrono::milliseconds op_timeout{static_cast<long long>(kCollectiveTimeoutS * 1000)};
};

class GlooCommunicator final : public Communicator {
 public:
  // Connects the full mesh through `store` (needed only during construction, wrapped in a
  // PrefixStore of options.prefix); throws CommunicatorError when a peer does not arrive in time.
  // Makes the process ignore SIGPIPE (when nothing else handles it): Gloo sends with writev,
  // which cannot ask for MSG_NOSIGNAL, so a write to a peer that has just died would kill this
  // rank by SIGPIPE, a failure of its own to the launcher, instead of failing the collective
  // with EPIPE, the echo of the peer's (peer_lost). Python, and so PyTorch, ignores it for the
  // same reason from startup.
  GlooCommunicator(int rank, int world_size, gloo::rendezvous::Store& store, const GlooOptions& options);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  std::string name() const override { return "gloo"; }

  void start_all_reduce_average(GradBucket bucket) override;
  void finish_all_reduces() override;

  void all_reduce_average(float* data, size_t count) override;
  void broadcast(float* data, size_t count, int root) override;
  void barrier() override;

 private:
  using Task = std::function<void(std::uint32_t tag)>;

  void enqueue(Task task);
  void run_blocking(Task task);  // enqueue, then wait for it (and everything before it)
  void wait_idle();              // rethrows the first failure
  void communication_loop();
  void sum_then_scale(float* data, size_t count, std::uint32_t tag);
  std::string describe_failure(const char* what, const std::exception& e) const;

  int rank_ = 0;
  int world_size_ = 1;
  std::chrono::milliseconds op_timeout_;
  std::shared_ptr<gloo::Context> context_;

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  std::deque<Task> queue_;        // guarded by mutex_
  size_t in_flight_ = 0;          // queued or running; guarded by mutex_
  std::exception_ptr failure_;    // first failure; sticky: the group is unusable after it
  bool stopping_ = false;
  std::uint32_t next_tag_ = 0;    // only touched by the communication thread
  std::thread thread_;
};

// The launcher's bootstrap, keys prefixed by XTRAIN_RUN_ID. One node: a FileStore in
// $XTRAIN_RUN_DIR/rendezvous, listening on 127.0.0.1. Several nodes: node 0's store at
// XTRAIN_STORE_ENDPOINT (with XTRAIN_JOB_TOKEN), listening on GLOO_SOCKET_IFNAME when set, else
// on XTRAIN_NODE_ADDR. `connect_timeout_s` bounds the wait for the store and the peers.
std::unique_ptr<Communicator> make_gloo_communicator(const WorkerEnv& env, double connect_timeout_s);

}  // namespace xtrain
