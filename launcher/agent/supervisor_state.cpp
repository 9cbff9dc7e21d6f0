// What the supervisor writes while it runs (state.json, coalesced) and once at the end (summary.json).
#include "launcher/agent/supervisor.hpp"

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/build_info.hpp"
#include "launcher/agent/supervisor_detail.hpp"

namespace xtrain::launcher {
using namespace supervisor_detail;

const char* Supervisor::phase_name(Phase phase) {
  switch (phase) {
    case Phase::kStarting: return "starting";
    case Phase::kRunning: return "running";
    case Phase::kDiagnosing: return "diagnosing";
    case Phase::kStopping: return "stopping";
    case Phase::kRestarting: return "restarting";
    case Phase::kFinished: return "finished";
  }
  return "unknown";
}

json Supervisor::root_cause_json() const {
  if (root_cause_) return to_json(*root_cause_);
  if (remote_cause_) return *remote_cause_;
  return nullptr;
}

// Coalesced: the events of one loop turn (8 ranks reaped together) cost one write.
void Supervisor::save_state() {
  if (state_write_pending_) return;
  state_write_pending_ = true;
  boost::asio::post(io_, [this] { write_state_now(); });
}

void Supervisor::write_state_now() {
  state_write_pending_ = false;
  try {
    run_dir_.write_state(state_json());
  } catch (const std::exception& e) {
    if (!state_error_reported_) spdlog::error("cannot write the state file: {}", e.what());
    state_error_reported_ = true;
  }
}

json Supervisor::state_json() const {
  json ranks = json::array();
  for (const Rank& rank : ranks_) ranks.push_back(to_json(rank.record));
  return {{"supervisor_pid", ::getpid()},
          {"status", phase_name(phase_)},
          {"run_id", run_id_},
          {"attempt", attempt_},
          {"max_restarts", plan_.spec.launcher.max_restarts},
          {"started_at", iso_time(started_at_)},
          {"updated_at", iso_time(std::chrono::system_clock::now())},
          {"world_size", ranks_.front().record.where.world_size},
          {"device", plan_.device},
          {"backend", plan_.backend},
          {"ranks", ranks},
          {"stragglers", stragglers_.to_json()}};
}

json Supervisor::summary_json() const {
  const Outcome& outcome = *outcome_;
  json ranks = json::array();
  for (const Rank& rank : ranks_) ranks.push_back(to_json(rank.record));
  return {{"status", outcome_name(outcome.kind)},
          {"exit_code", outcome.exit_code},
          {"exit_reason", outcome.reason},
          {"root_cause", root_cause_json()},
          {"node", plan_.spec.nodes.node_rank},
          {"nnodes", plan_.spec.nodes.nnodes},
          {"run_id", run_id_},
          {"run_dir", plan_.run_dir},
          {"supervisor_pid", ::getpid()},
          {"attempts", attempt_},
          {"max_restarts", plan_.spec.launcher.max_restarts},
          {"started_at", iso_time(started_at_)},
          {"finished_at", iso_time(std::chrono::system_clock::now())},
          {"duration_s", seconds_between(started_, SteadyClock::now())},
          {"world_size", ranks_.front().record.where.world_size},
          {"device", plan_.device},
          {"backend", plan_.backend},
          {"ranks", ranks},
          {"stragglers", stragglers_.to_json()},
          {"hang_report", hang_report_},
          {"attempt_history", attempt_history_},
          {"xlaunch_version", build_version()}};
}

}  // namespace xtrain::launcher
