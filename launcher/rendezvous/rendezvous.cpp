#include "launcher/rendezvous/rendezvous.hpp"

#include <utility>

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include <arpa/inet.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/exit_codes.hpp"
#include "common/open_files.hpp"
#include "launcher/plan/nccl.hpp"
#include "launcher/rendezvous/attempt.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/outcome.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Blocking calls are made in slices this long, so that a signal can abandon a round.
constexpr milliseconds kSlice{500};
// A call that does not wait for keys (SET, ADD) gives up after this long: the store is local to
// node 0 or across a LAN.
constexpr milliseconds kIoTimeout{std::chrono::seconds(10)};
// A GET that waits for a stop record: the protocol's timeout is 32 bits of milliseconds.
constexpr milliseconds kForever{std::chrono::hours(24)};

[[noreturn]] void rendezvous_failure(const std::string& message) {
  launch_failure("rendezvous: " + message);
}

bool is_literal_address(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

milliseconds ms(double seconds) { return milliseconds(static_cast<long long>(seconds * 1000)); }

// Connections node 0's store holds at most: each node's control, watcher and lease connections,
// one per rank while Gloo ranks meet (NCCL ranks never connect), and a few for tools
// (xtrain-kv-tool) and reconnects.
std::size_t store_connections(int nnodes, int store_ranks) {
  return 3 * static_cast<std::size_t>(nnodes) + static_cast<std::size_t>(store_ranks) + 64;
}

// Messages name at most this many nodes ("... and 4000 more").
constexpr size_t kNodesNamed = 16;
// Registrations node 0 reads per MGET: each is under 120 bytes, so a chunk fits a frame easily.
constexpr size_t kReadChunk = 4096;

std::string node_list(const std::vector<int>& nodes) {
  std::string out;
  for (size_t i = 0; i < nodes.size() && i < kNodesNamed; ++i) out += (i ? ", " : "") + std::to_string(nodes[i]);
  if (nodes.size() > kNodesNamed) out += fmt::format(" and {} more", nodes.size() - kNodesNamed);
  return out;
}

}  // namespace

NodeLink::NodeLink(const Plan& plan)
    : node_(plan.spec.nodes.node_rank), nnodes_(plan.spec.nodes.nnodes),
      local_world_size_(static_cast<int>(plan.ranks.size())), timeout_s_(plan.spec.nodes.rdzv_timeout_s),
      backend_(plan.backend), token_(plan.job_token),
      keepalive_{ms(plan.spec.nodes.keepalive_interval_s), ms(plan.spec.nodes.keepalive_timeout_s), kIoTimeout} {
  try {
    endpoint_ = kv::parse_endpoint(plan.spec.nodes.rdzv_endpoint);
  } catch (const std::exception& e) {
    throw SpecError("nodes.rdzv_endpoint", e.what());
  }
  if (node_ != 0) return;
  // A host name may resolve to an address other nodes cannot reach (Debian maps its own name to
  // 127.0.1.1): listen everywhere unless the endpoint names one address.
  const kv::Endpoint bind{is_literal_address(endpoint_.host) ? endpoint_.host : "0.0.0.0", endpoint_.port};
  kv::KvServerLimits limits;
  limits.max_connections = store_connections(nnodes_, backend_ == "gloo" ? nnodes_ * local_world_size_ : 0);
  try {
    reserve_open_files(limits.max_connections,
                       fmt::format("node 0's rendezvous store (for {} nodes of {} ranks)", nnodes_, local_world_size_));
    server_ = std::make_unique<kv::KvServerThread>(
        bind, token_, limits, [this](kv::StoreEditor& store, const kv::LeaseLoss& loss) { on_lease_lost(store, loss); });
  } catch (const std::exception& e) {
    rendezvous_failure(fmt::format("node 0 cannot serve the store on {}: {}", bind.str(), e.what()));
  }
}

NodeLink::~NodeLink() {
  lease_.reset();   // released first: its loss handler touches the clients
  server_.reset();  // stopped before the members its lease hook reads
}

std::string NodeLink::key(int attempt, const std::string& name) const {
  return fmt::format("xlaunch/a{}/{}", attempt, name);
}

kv::KvClient& NodeLink::control(const std::atomic<bool>* cancel) {
  if (control_) return *control_;
  const auto deadline = Clock::now() + ms(timeout_s_);
  std::string last;
  while (!cancel || !*cancel) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    try {
      control_ = std::make_unique<kv::KvClient>(endpoint_, token_,
                                                kv::KvClientOptions{std::min(left, milliseconds(kSlice * 2)), kIoTimeout});
      node_addr_ = control_->local_address();
      return *control_;
    } catch (const kv::KvError& e) {
      last = e.what();
      if (last.find("refused this client") != std::string::npos) rendezvous_failure(last);
    }
  }
  if (cancel && *cancel) rendezvous_failure("abandoned (xlaunch is stopping)");
  rendezvous_failure(fmt::format("node {} could not reach node 0's store within nodes.rdzv_timeout_s = {} s: {}",
                                 node_, timeout_s_, last));
}

// Node 0's part of a round: waits for every node's registration (in slices, so that a signal can
// abandon the round), reads them all (a few MGETs), and returns the plan or {"error": why}.
json NodeLink::decide(kv::KvClient& client, int attempt, const std::string& run_id, Clock::time_point deadline,
                      const std::atomic<bool>& cancel) {
  std::vector<std::string> keys;  // only node 0 looks at every node: the others' work stays O(1)
  for (int n = 0; n < nnodes_; ++n) keys.push_back(key(attempt, fmt::format("node/{}", n)));
  std::vector<std::string> missing;
  for (;;) {
    if (cancel) rendezvous_failure("abandoned (xlaunch is stopping)");
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    try {
      client.wait(keys, std::max(milliseconds(0), std::min(left, kSlice)));
      missing.clear();  // an earlier slice's
      break;
    } catch (const kv::KvTimeoutError& e) {
      missing = e.missing();
      if (left <= kSlice) break;
    }
  }
  if (!missing.empty()) {
    const std::unordered_set<std::string> gone(missing.begin(), missing.end());
    std::vector<int> absent;
    for (int n = 0; n < nnodes_; ++n) {
      if (gone.contains(keys[n])) absent.push_back(n);
    }
    return {{"error", fmt::format("{} of {} nodes never arrived within nodes.rdzv_timeout_s = {} s: node{} {} "
                                  "(store {}, attempt {})",
                                  absent.size(), nnodes_, timeout_s_, absent.size() == 1 ? "" : "s",
                                  node_list(absent), endpoint_.str(), attempt)}};
  }
  std::vector<int> odd;  // nodes whose rank count differs from node 0's
  std::string mismatch;
  for (size_t first = 0; first < keys.size(); first += kReadChunk) {
    const std::vector<std::string> chunk(keys.begin() + first, keys.begin() + std::min(keys.size(), first + kReadChunk));
    const std::vector<std::string> values = client.get_many(chunk, milliseconds(0));
    for (size_t i = 0; i < values.size(); ++i) {
      const int local = json::parse(values[i]).at("local_world_size").get<int>();
      if (local != local_world_size_ && odd.size() < kNodesNamed) {
        mismatch += fmt::format(", node {} has {} ranks", first + i, local);
      }
      if (local != local_world_size_) odd.push_back(static_cast<int>(first + i));
    }
  }
  if (!odd.empty()) {
    return {{"error", fmt::format("every node must run the same number of ranks: node 0 has {}{}{}", local_world_size_,
                                  mismatch, odd.size() > kNodesNamed ? fmt::format(" and {} more", odd.size() - kNodesNamed) : "")}};
  }
  // node 0's address as the others reach it is the endpoint's host: they just did.
  return {{"run_id", run_id},
          {"world_size", nnodes_ * local_world_size_},
          {"local_world_size", local_world_size_},
          {"master_addr", endpoint_.host},
          {"master_port", pick_free_port("0.0.0.0")},
          {"nccl_id", backend_ == "nccl" ? nccl_unique_id_hex() : std::string()}};
}

RoundResult NodeLink::join(int attempt, const std::string& run_id, const std::atomic<bool>& cancel) {
  const auto started = Clock::now();
  const auto deadline = started + ms(timeout_s_);
  kv::KvClient& client = control(&cancel);
  try {
    if (node_ != 0) take_lease(attempt);
    client.set(key(attempt, fmt::format("node/{}", node_)),
               json{{"addr", node_addr_}, {"local_world_size", local_world_size_}, {"pid", ::getpid()}}.dump());
    if (node_ == 0) client.set(key(attempt, "plan"), decide(client, attempt, run_id, deadline, cancel).dump());
    json plan;
    for (;;) {
      if (cancel) rendezvous_failure("abandoned (xlaunch is stopping)");
      // Node 0 publishes an error at its deadline: wait a little longer than that for it.
      const auto left = std::chrono::duration_cast<milliseconds>(deadline + std::chrono::seconds(5) - Clock::now());
      if (left.count() <= 0) {
        rendezvous_failure(fmt::format("node 0 published no plan for attempt {} within nodes.rdzv_timeout_s = {} s "
                                       "(store {})",
                                       attempt, timeout_s_, endpoint_.str()));
      }
      try {
        plan = json::parse(client.get(key(attempt, "plan"), std::min(left, kSlice)));
        break;
      } catch (const kv::KvTimeoutError&) {
      }
    }
    if (plan.contains("error")) rendezvous_failure(plan.at("error").get<std::string>());
    RoundResult result;
    result.run_id = plan.at("run_id").get<std::string>();
    result.world_size = plan.at("world_size").get<int>();
    result.rank_offset = node_ * plan.at("local_world_size").get<int>();
    result.master_addr = plan.at("master_addr").get<std::string>();
    result.master_port = plan.at("master_port").get<int>();
    result.nccl_id_hex = plan.at("nccl_id").get<std::string>();
    result.node_addr = node_addr_;
    result.store_endpoint = endpoint_.str();
    result.job_token = token_;
    spdlog::info("rendezvous: attempt {}: {} nodes met in {:.3f} s; node {} has ranks {}-{} of {}", attempt, nnodes_,
                 std::chrono::duration<double>(Clock::now() - started).count(), node_, result.rank_offset,
                 result.rank_offset + local_world_size_ - 1, result.world_size);
    return result;
  } catch (const kv::KvError& e) {
    rendezvous_failure(e.what());
  } catch (const json::exception& e) {
    rendezvous_failure(std::string("malformed data in the store: ") + e.what());
  }
}

bool NodeLink::publish_stop(int attempt, const json& record) {
  kv::KvClient& client = control(nullptr);
  if (client.add(key(attempt, "stop_count"), 1) != 1) return false;
  for (int n = 0; n < nnodes_; ++n) client.set(key(attempt, fmt::format("stop/{}", n)), record.dump());
  return true;
}

void NodeLink::take_lease(int attempt) {
  lease_.reset();  // an earlier attempt's, when its end never came (a round that failed)
  lease_ = std::make_unique<kv::KvLease>(endpoint_, token_, key(attempt, fmt::format("lease/{}", node_)),
                                         json{{"node", node_}, {"attempt", attempt}}.dump(), keepalive_,
                                         [this](const std::string& why) { lose_store(why); });
}

void NodeLink::lose_store(const std::string& why) {
  const std::string reason = fmt::format("node 0's store is lost: {} (nodes.keepalive_timeout_s = {} s)", why,
                                         std::chrono::duration<double>(keepalive_.timeout).count());
  spdlog::error("rendezvous: {}", reason);
  std::lock_guard lock(watch_mutex_);
  store_lost_ = reason;
  if (watcher_) watcher_->abort(reason);
  control_->abort(reason);  // exists: the lease is taken after it connected, and it is never replaced
}

json NodeLink::wait_stop(int attempt) {
  const json released = {{"end", true}};
  {
    std::lock_guard lock(watch_mutex_);
    if (!store_lost_.empty()) throw kv::KvError(store_lost_);
  }
  auto client = std::make_shared<kv::KvClient>(endpoint_, token_, kv::KvClientOptions{kIoTimeout, kIoTimeout});
  {
    std::lock_guard lock(watch_mutex_);
    if (!store_lost_.empty()) throw kv::KvError(store_lost_);
    if (watch_released_ >= attempt) return released;
    watcher_ = client;
  }
  for (;;) {
    try {
      return json::parse(client->get(key(attempt, fmt::format("stop/{}", node_)), kForever));
    } catch (const kv::KvTimeoutError&) {
    } catch (const kv::KvError&) {
      std::lock_guard lock(watch_mutex_);
      if (watch_released_ >= attempt && store_lost_.empty()) return released;
      throw;
    }
  }
}

void NodeLink::release_watcher(int attempt) {
  std::lock_guard lock(watch_mutex_);
  watch_released_ = attempt;
  if (watcher_) watcher_->abort(fmt::format("the end of attempt {}", attempt));
}

NodeLink::Closing NodeLink::close_attempt(int attempt, const json& outcome, bool final, double timeout_s) {
  release_watcher(attempt);
  try {
    return exchange_outcomes(control(nullptr), attempt, outcome, final, timeout_s);
  } catch (...) {
    lease_.reset();
    throw;
  }
}

NodeLink::Closing NodeLink::exchange_outcomes(kv::KvClient& client, int attempt, const json& outcome, bool final,
                                              double timeout_s) {
  client.set(key(attempt, fmt::format("done/{}", node_)), outcome.dump());
  json verdict;
  if (node_ == 0) {
    std::vector<std::string> done;
    for (int n = 0; n < nnodes_; ++n) done.push_back(key(attempt, fmt::format("done/{}", n)));
    json silent = json::array();
    try {
      client.wait(done, ms(timeout_s));
    } catch (const kv::KvTimeoutError& e) {
      const std::unordered_set<std::string> missing(e.missing().begin(), e.missing().end());
      for (int n = 0; n < nnodes_; ++n) {
        if (missing.contains(done[n])) silent.push_back(n);
      }
    }
    json stop = nullptr;
    if (client.check({key(attempt, "stop_count")})) {
      // The winner sets the records right after its ADD: give it a moment.
      try {
        stop = json::parse(client.get(key(attempt, "stop/0"), kIoTimeout));
      } catch (const kv::KvTimeoutError&) {
      }
    }
    verdict = {{"silent", silent}, {"stop", stop}};
    client.set(key(attempt, "end"), verdict.dump());
  } else {
    // Node 0 publishes its verdict at most timeout_s after its own end, which comes at most about
    // timeout_s after this node's (else this node would be among the silent ones).
    try {
      verdict = json::parse(client.get(key(attempt, "end"), ms(2 * timeout_s) + kIoTimeout));
    } catch (const kv::KvTimeoutError&) {
      verdict = {{"silent", json::array({0})}, {"stop", nullptr}};
    }
  }
  Closing closing;
  closing.silent_nodes = verdict.at("silent").get<std::vector<int>>();
  if (!verdict.at("stop").is_null()) closing.stop = verdict.at("stop");
  // Read: this node's liveness matters to nobody now, and node 0 may close its store any time
  // after the left/<k> below, which must not look like node 0's loss.
  lease_.reset();
  if (final) {
    client.set(key(attempt, fmt::format("left/{}", node_)), "1");
    if (node_ == 0) {
      const std::unordered_set<int> silent(closing.silent_nodes.begin(), closing.silent_nodes.end());
      std::vector<std::string> left;
      for (int n = 0; n < nnodes_; ++n) {
        if (!silent.contains(n)) left.push_back(key(attempt, fmt::format("left/{}", n)));
      }
      try {
        client.wait(left, kIoTimeout);
      } catch (const kv::KvTimeoutError& e) {
        spdlog::warn("rendezvous: {} node(s) did not confirm the end; closing the store anyway", e.missing().size());
      }
    }
  }
  return closing;
}

// A node's lease ended without RELEASE. Runs on node 0's store thread, so it edits the store
// directly; it must not block.
void NodeLink::on_lease_lost(kv::StoreEditor& store, const kv::LeaseLoss& loss) const {
  const json info = json::parse(loss.info, nullptr, false);
  if (!info.is_object()) return;
  const int node = info.value("node", -1);
  const int attempt = info.value("attempt", 0);
  if (node <= 0 || node >= nnodes_ || attempt <= 0) return;
  const std::string left = key(attempt, fmt::format("left/{}", node));
  if (store.contains(key(attempt, fmt::format("done/{}", node)))) {  // it had ended its attempt
    if (!store.contains(left)) store.set(left, "gone");
    return;
  }
  const std::string why = fmt::format("its xlaunch is lost ({}: {})", loss.peer, loss.why);
  spdlog::error("rendezvous: node {}: {}; stopping attempt {} on every node", node, why, attempt);
  const json outcome = {{"status", outcome_name(OutcomeKind::kNodeLost)},
                        {"exit_code", exit_code::kLaunchFailure},
                        {"reason", why}};
  const json record = {{"node", node},
                       {"outcome", outcome},
                       {"root_cause", {{"node", node}, {"rank", nullptr}, {"kind", "node_lost"},
                                       {"message", fmt::format("node {}: {}", node, why)}}},
                       {"restart", false}};
  if (store.add(key(attempt, "stop_count"), 1) == 1) {
    for (int n = 0; n < nnodes_; ++n) store.set(key(attempt, fmt::format("stop/{}", n)), record.dump());
  }
  store.set(key(attempt, fmt::format("done/{}", node)), outcome.dump());
  store.set(left, "lost");
}

}  // namespace xtrain::launcher
