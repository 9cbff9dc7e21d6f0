#include "launcher/rendezvous.hpp"

#include <utility>

#include <algorithm>
#include <chrono>

#include <arpa/inet.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/exit_codes.hpp"
#include "launcher/attempt.hpp"
#include "launcher/launch_error.hpp"

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
  throw LaunchError(exit_code::kLaunchFailure, "rendezvous: " + message);
}

bool is_literal_address(const std::string& host) {
  unsigned char buf[16];
  return ::inet_pton(AF_INET, host.c_str(), buf) == 1 || ::inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

milliseconds ms(double seconds) { return milliseconds(static_cast<long long>(seconds * 1000)); }

std::string node_list(const std::vector<int>& nodes) {
  std::string out;
  for (int n : nodes) out += (out.empty() ? "" : ", ") + std::to_string(n);
  return out;
}

}  // namespace

NodeLink::NodeLink(const Plan& plan)
    : node_(plan.spec.nodes.node_rank), nnodes_(plan.spec.nodes.nnodes),
      local_world_size_(static_cast<int>(plan.ranks.size())), timeout_s_(plan.spec.nodes.rdzv_timeout_s),
      backend_(plan.backend), token_(plan.job_token) {
  try {
    endpoint_ = kv::parse_endpoint(plan.spec.nodes.rdzv_endpoint);
  } catch (const std::exception& e) {
    throw SpecError("nodes.rdzv_endpoint", e.what());
  }
  if (node_ != 0) return;
  // A host name may resolve to an address other nodes cannot reach (Debian maps its own name to
  // 127.0.1.1): listen everywhere unless the endpoint names one address.
  const kv::Endpoint bind{is_literal_address(endpoint_.host) ? endpoint_.host : "0.0.0.0", endpoint_.port};
  try {
    server_ = std::make_unique<kv::KvServerThread>(bind, token_);
  } catch (const std::exception& e) {
    rendezvous_failure(fmt::format("node 0 cannot serve the store on {}: {}", bind.str(), e.what()));
  }
}

NodeLink::~NodeLink() = default;

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

RoundResult NodeLink::join(int attempt, const std::string& run_id, const std::atomic<bool>& cancel) {
  const auto started = Clock::now();
  const auto deadline = started + ms(timeout_s_);
  kv::KvClient& client = control(&cancel);
  try {
    client.set(key(attempt, fmt::format("node/{}", node_)),
               json{{"addr", node_addr_}, {"local_world_size", local_world_size_}, {"pid", ::getpid()}}.dump());
    std::vector<std::string> keys;
    for (int n = 0; n < nnodes_; ++n) keys.push_back(key(attempt, fmt::format("node/{}", n)));
    if (node_ == 0) {
      // Wait for every node, in slices so that a signal can abandon the round.
      std::vector<std::string> missing;
      for (;;) {
        if (cancel) rendezvous_failure("abandoned (xlaunch is stopping)");
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        try {
          client.wait(keys, std::max(milliseconds(0), std::min(left, kSlice)));
          break;
        } catch (const kv::KvTimeoutError& e) {
          missing = e.missing();
          if (left <= kSlice) break;
        }
      }
      json plan;
      if (!missing.empty()) {
        std::vector<int> absent;
        for (int n = 0; n < nnodes_; ++n) {
          if (std::find(missing.begin(), missing.end(), keys[n]) != missing.end()) absent.push_back(n);
        }
        plan = {{"error", fmt::format("{} of {} nodes never arrived within nodes.rdzv_timeout_s = {} s: node{} {} "
                                      "(store {}, attempt {})",
                                      absent.size(), nnodes_, timeout_s_, absent.size() == 1 ? "" : "s",
                                      node_list(absent), endpoint_.str(), attempt)}};
      } else {
        json offsets = json::array();
        int world = 0;
        std::string mismatch;
        for (int n = 0; n < nnodes_; ++n) {
          const json info = json::parse(client.get(keys[n], milliseconds(0)));
          const int local = info.at("local_world_size").get<int>();
          if (local != local_world_size_) {
            mismatch += fmt::format("{}node {} has {} ranks", mismatch.empty() ? "" : ", ", n, local);
          }
          offsets.push_back(world);
          world += local;
        }
        if (!mismatch.empty()) {
          plan = {{"error", fmt::format("every node must run the same number of ranks: node 0 has {}, {}",
                                        local_world_size_, mismatch)}};
        } else {
          // node 0's address as the others reach it is the endpoint's host: they just did.
          plan = {{"run_id", run_id},
                  {"world_size", world},
                  {"offsets", offsets},
                  {"master_addr", endpoint_.host},
                  {"master_port", pick_free_port("0.0.0.0")},
                  {"nccl_id", backend_ == "nccl" ? nccl_unique_id_hex() : std::string()}};
        }
      }
      client.set(key(attempt, "plan"), plan.dump());
    }
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
    result.rank_offset = plan.at("offsets").at(node_).get<int>();
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

json NodeLink::wait_stop(int attempt) {
  if (!watcher_) watcher_ = std::make_unique<kv::KvClient>(endpoint_, token_, kv::KvClientOptions{kIoTimeout, kIoTimeout});
  for (;;) {
    try {
      return json::parse(watcher_->get(key(attempt, fmt::format("stop/{}", node_)), kForever));
    } catch (const kv::KvTimeoutError&) {
    }
  }
}

NodeLink::Closing NodeLink::close_attempt(int attempt, const json& outcome, bool final, double timeout_s) {
  Closing closing;
  kv::KvClient& client = control(nullptr);
  client.set(key(attempt, fmt::format("done/{}", node_)), outcome.dump());
  std::vector<std::string> done;
  for (int n = 0; n < nnodes_; ++n) done.push_back(key(attempt, fmt::format("done/{}", n)));
  try {
    client.wait(done, ms(timeout_s));
  } catch (const kv::KvTimeoutError& e) {
    for (int n = 0; n < nnodes_; ++n) {
      if (std::find(e.missing().begin(), e.missing().end(), done[n]) != e.missing().end()) {
        closing.silent_nodes.push_back(n);
      }
    }
  }
  const std::string own_stop = key(attempt, fmt::format("stop/{}", node_));
  if (client.check({key(attempt, "stop_count")})) {
    // The winner sets the records right after its ADD: give it a moment.
    try {
      closing.stop = json::parse(client.get(own_stop, kIoTimeout));
    } catch (const kv::KvTimeoutError&) {
    }
  } else {
    client.set(own_stop, json{{"end", true}}.dump());  // releases this node's watcher
  }
  if (final) {
    client.set(key(attempt, fmt::format("left/{}", node_)), "1");
    if (node_ == 0) {
      std::vector<std::string> left;
      for (int n = 0; n < nnodes_; ++n) {
        if (std::find(closing.silent_nodes.begin(), closing.silent_nodes.end(), n) == closing.silent_nodes.end()) {
          left.push_back(key(attempt, fmt::format("left/{}", n)));
        }
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

}  // namespace xtrain::launcher
