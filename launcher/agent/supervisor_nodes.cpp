// The supervisor on several nodes: each attempt's rendezvous round, the watch on the other nodes'
// stops, and the exchange of outcomes at the attempt's end, on helper threads that post to the loop.
#include "launcher/agent/supervisor.hpp"

#include <algorithm>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/exit_codes.hpp"
#include "launcher/agent/supervisor_detail.hpp"
#include "launcher/rendezvous/attempt.hpp"
#include "launcher/run/launch_error.hpp"

namespace xtrain::launcher {
using namespace supervisor_detail;

void Supervisor::begin_rendezvous() {
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  cancel_rendezvous_ = false;
  save_state();
  rendezvous_thread_ = std::thread([this, attempt = attempt_, run_id = run_id_] {
    std::optional<RoundResult> round;
    std::string error;
    try {
      round = link_->join(attempt, run_id, cancel_rendezvous_);
    } catch (const std::exception& e) {
      error = e.what();
    }
    boost::asio::post(io_, [this, attempt, round, error] { on_rendezvous(attempt, round, error); });
  });
}

void Supervisor::on_rendezvous(int attempt, std::optional<RoundResult> round, const std::string& error) {
  if (attempt != attempt_ || phase_ != Phase::kStarting) return;  // abandoned: a signal or the timeout
  if (!round) {
    attempt_failed_to_start(LaunchError(exit_code::kLaunchFailure, error));
    return;
  }
  const RankPlacement& first = ranks_.front().record.where;
  if (round->world_size != first.world_size || round->rank_offset != first.rank) {
    attempt_failed_to_start(LaunchError(
        exit_code::kLaunchFailure, fmt::format("rendezvous: node 0 placed this node's ranks at {} of {}, expected {} of {}",
                                               round->rank_offset, round->world_size, first.rank, first.world_size)));
    return;
  }
  if (run_id_ != round->run_id) {
    spdlog::info("run id {} (node 0's)", round->run_id);
    run_id_ = round->run_id;
  }
  round_met_ = true;
  watcher_thread_ = std::thread([this, attempt] {
    try {
      nlohmann::json record = link_->wait_stop(attempt);
      boost::asio::post(io_, [this, attempt, record] { on_remote_stop(attempt, record); });
    } catch (const std::exception& e) {
      boost::asio::post(io_, [this, attempt, error = std::string(e.what())] { on_store_lost(attempt, error); });
    }
  });
  try {
    launch_ranks(make_attempt_env(plan_, run_id_, attempt_ - 1, &*round));
  } catch (const LaunchError& e) {
    attempt_failed_to_start(e);
  }
}

void Supervisor::on_remote_stop(int attempt, const json& record) {
  if (attempt != attempt_ || attempt_over_ || record.contains("end")) return;
  if (record.value("node", -1) == link_->node()) return;  // this node's own stop: already under way
  adopt_remote_stop(record);
}

// Another node's root cause becomes this node's: same outcome, same exit code, same restart decision.
void Supervisor::adopt_remote_stop(const json& record) {
  const int node = record.value("node", -1);
  const json& outcome = record.at("outcome");
  const bool restart = record.value("restart", false);
  outcome_ = Outcome{outcome_kind(outcome.at("status").get<std::string>()), outcome.at("exit_code").get<int>(),
                     fmt::format("node {}: {}", node, outcome.at("reason").get<std::string>())};
  root_cause_.reset();
  remote_cause_.reset();
  if (record.contains("root_cause") && !record.at("root_cause").is_null()) remote_cause_ = record.at("root_cause");
  if (phase_ == Phase::kRunning || phase_ == Phase::kStarting) {
    spdlog::error("{}; stopping {} of this node (SIGTERM, then SIGKILL after {} s){}", outcome_->reason,
                  plural(running_count(), "running rank"), plan_.spec.launcher.term_timeout_s,
                  restart ? ", then restarting" : "");
    stop_gang(restart ? Phase::kRestarting : Phase::kStopping, SIGTERM, false);
  } else if (phase_ == Phase::kDiagnosing) {
    after_diagnosis_ = restart ? Phase::kRestarting : Phase::kStopping;
  } else if (phase_ == Phase::kStopping || phase_ == Phase::kRestarting) {
    phase_ = restart ? Phase::kRestarting : Phase::kStopping;
  }
}

void Supervisor::on_store_lost(int attempt, const std::string& error) {
  if (attempt != attempt_ || attempt_over_ || phase_ != Phase::kRunning) return;
  outcome_ = Outcome{OutcomeKind::kNodeLost, exit_code::kLaunchFailure, "lost node 0: " + error};
  root_cause_.reset();
  remote_cause_ = json{{"node", 0}, {"rank", nullptr}, {"kind", "node_lost"}, {"message", error}};
  spdlog::error("{}; stopping {} (SIGTERM, then SIGKILL after {} s)", outcome_->reason,
                plural(running_count(), "running rank"), plan_.spec.launcher.term_timeout_s);
  stop_gang(Phase::kStopping, SIGTERM, false);
}

// The end of a round: every node reports its outcome; a root cause published by another node wins.
// The exchange waits for the other nodes (up to timeout_s), so it runs on the helper thread while
// the event loop goes on (signals, the job timeout); on_round_closed() takes the attempt on.
void Supervisor::close_round() {
  round_met_ = false;
  const json mine = {{"status", outcome_name(outcome_->kind)}, {"exit_code", outcome_->exit_code},
                     {"reason", outcome_->reason}};
  const double timeout_s = std::max(plan_.spec.nodes.rdzv_timeout_s, plan_.spec.launcher.term_timeout_s + 5);
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  rendezvous_thread_ = std::thread([this, mine, timeout_s, attempt = attempt_, final = phase_ != Phase::kRestarting] {
    std::optional<NodeLink::Closing> closing;
    std::string error;
    try {
      closing = link_->close_attempt(attempt, mine, final, timeout_s);
    } catch (const std::exception& e) {
      error = e.what();
    }
    boost::asio::post(io_, [this, closing, error, timeout_s] { on_round_closed(closing, error, timeout_s); });
  });
}

void Supervisor::on_round_closed(const std::optional<NodeLink::Closing>& closing, const std::string& error,
                                 double timeout_s) {
  if (closing) {
    if (closing->stop && closing->stop->value("node", -1) != link_->node()) adopt_remote_stop(*closing->stop);
    if (!closing->silent_nodes.empty() && outcome_->kind == OutcomeKind::kSucceeded) {
      std::string nodes;
      for (int n : closing->silent_nodes) nodes += (nodes.empty() ? "" : ", ") + std::to_string(n);
      outcome_ = Outcome{OutcomeKind::kNodeLost, exit_code::kLaunchFailure,
                         fmt::format("node(s) {} did not report the end of attempt {} within {} s", nodes, attempt_,
                                     timeout_s)};
      remote_cause_ = json{{"node", closing->silent_nodes.front()}, {"rank", nullptr}, {"kind", "node_lost"},
                           {"message", outcome_->reason}};
      phase_ = Phase::kStopping;
    }
  } else {
    spdlog::error("rendezvous: the end of attempt {}: {}", attempt_, error);
    if (outcome_->kind == OutcomeKind::kSucceeded) {
      outcome_ = Outcome{OutcomeKind::kNodeLost, exit_code::kLaunchFailure, "lost node 0: " + error};
      remote_cause_ = json{{"node", 0}, {"rank", nullptr}, {"kind", "node_lost"}, {"message", error}};
      phase_ = Phase::kStopping;
    }
  }
  if (watcher_thread_.joinable()) watcher_thread_.join();
  conclude_attempt();
}

void Supervisor::join_helpers() {
  cancel_rendezvous_ = true;
  if (rendezvous_thread_.joinable()) rendezvous_thread_.join();
  if (watcher_thread_.joinable()) watcher_thread_.join();
}

}  // namespace xtrain::launcher
