#include "launcher/agent/supervisor.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <csignal>
#include <cstring>

#include <boost/asio/post.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/exit_codes.hpp"
#include "common/heartbeat_record.hpp"
#include "launcher/cli/torchrun.hpp"
#include "launcher/process/proc_info.hpp"
#include "launcher/rendezvous/attempt.hpp"
#include "launcher/run/launch_error.hpp"

namespace xtrain::launcher {
namespace {

using nlohmann::json;
using SteadyClock = std::chrono::steady_clock;

constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};
// After every rank was reaped and its group SIGKILLed, output can stay open only if some
// process left its group (setsid). Wait this long for it, then stop reading.
constexpr double kDrainSeconds = 0.3;
// How long a peer_lost failure waits for the primary failure it echoes (the primary rank may take
// a moment to exit after its connections closed, or to be reaped).
constexpr double kEchoWaitS = 2.0;
// How long a hang report waits for the backtraces it asked for, and how often it looks.
constexpr double kBacktraceWaitS = 1.0;
constexpr double kBacktracePollS = 0.02;
// scancel (SLURM's proctrack signals every process of the step) and a terminal's Ctrl-C without job
// control signal the ranks and xlaunch together, in no set order: a rank killed by such a signal may
// be reaped, and the whole attempt end, before xlaunch's own copy is handled. It is waited for this
// long after the rank died before the rank is reported as the failure.
constexpr double kJobSignalWindowS = 1.0;

SteadyClock::duration seconds(double s) {
  return std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string plural(int n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

std::string make_run_id(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm parts{};
  localtime_r(&now, &parts);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &parts);
  return fmt::format("{}-{}-{}", name, stamp, ::getpid());
}

// A rank that failed without a result file (it could not write one: a full disk) still said in its
// heartbeat record how it failed, and its error line is in the output xlaunch kept (`tail`); null
// when the record says nothing.
json result_from_record(const std::string& heartbeat_file, const std::vector<std::string>& tail) {
  const auto record = read_heartbeat_record(heartbeat_file);
  if (!record || record->failure == static_cast<std::int32_t>(RecordedFailure::kNone)) return nullptr;
  const bool peer_lost = record->failure == static_cast<std::int32_t>(RecordedFailure::kPeerLost);
  json result = {{"status", "failed"},
                 {"failure_kind", peer_lost ? "peer_lost" : "primary"},
                 {"note", "no result file (the rank could not write it): the failure kind is from its heartbeat "
                          "record, the error from its output"}};
  constexpr std::string_view kError = "error: ";
  for (auto line = tail.rbegin(); line != tail.rend(); ++line) {
    if (const size_t at = line->find(kError); at != std::string::npos) {
      result["error"] = line->substr(at + kError.size());
      break;
    }
  }
  return result;
}

// The worker says its failure is the echo of a peer's (worker/main.cpp: failure_kind).
bool is_peer_lost(const json& result) {
  return result.is_object() && result.value("failure_kind", json()) == "peer_lost";
}

std::string result_message(const json& result) {
  if (!result.is_object()) return "";
  if (auto it = result.find("error"); it != result.end()) return it->is_string() ? it->get<std::string>() : it->dump();
  if (auto it = result.find("unreadable"); it != result.end()) return "result file unreadable: " + it->get<std::string>();
  return "";
}

}  // namespace

void block_handled_signals(bool block) {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kHandledSignals) sigaddset(&set, sig);
  pthread_sigmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

std::optional<int> take_pending_stop_signal() {
  sigset_t pending;
  sigemptyset(&pending);
  if (sigpending(&pending) != 0) return std::nullopt;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    if (sigismember(&pending, sig) != 1) continue;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    const timespec now = {0, 0};
    if (sigtimedwait(&one, nullptr, &now) == sig) return sig;
  }
  return std::nullopt;
}

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

Supervisor::Supervisor(const Plan& plan, RunDir& run_dir, Console* console, Guard& guard)
    : plan_(plan), run_dir_(run_dir), console_(console), guard_(guard), signals_(io_), job_timer_(io_),
      kill_timer_(io_), drain_timer_(io_), echo_timer_(io_), diagnosis_timer_(io_), job_signal_timer_(io_),
      live_report_(io_, plan.run_dir) {
  for (const RankPlacement& where : plan.ranks) {
    log_fds_.push_back(run_dir.open_rank_log(where.rank));
    ranks_.emplace_back(where);
  }
  if (plan.spec.nodes.nnodes > 1) link_ = std::make_unique<NodeLink>(plan);
  // Beats are watched for the watchdog, and for our own worker's progress records (stragglers).
  // Not otherwise: closing an inotify instance waits for an RCU grace period (~15 ms at exit).
  const double heartbeat_s = plan.spec.launcher.heartbeat_timeout_s;
  if (heartbeat_s <= 0 && !plan.own_worker) return;
  try {
    heartbeat_ = std::make_unique<HeartbeatWatch>(io_, run_files::ranks(plan.run_dir), plan.ranks.front().world_size,
                                                  heartbeat_s, [this](int rank) { on_hung(rank); },
                                                  [this](int rank) { on_beat(rank); });
  } catch (const std::exception& e) {
    if (heartbeat_s > 0) throw LaunchError(exit_code::kLaunchFailure, e.what());
    spdlog::warn("{}: no straggler warnings for this run", e.what());
  }
}

Supervisor::~Supervisor() {
  join_helpers();
  signal_groups(SIGKILL);  // only if run() ended by an exception: otherwise the groups are released
  for (int fd : log_fds_) ::close(fd);
}

int Supervisor::run() {
  started_at_ = std::chrono::system_clock::now();
  started_ = SteadyClock::now();
  run_id_ = make_run_id(plan_.spec.name);
  for (int sig : kHandledSignals) signals_.add(sig);
  wait_for_signal();
  block_handled_signals(false);  // a signal that arrived early is delivered now, to the signal_set
  if (plan_.spec.launcher.timeout_s > 0) {
    job_timer_.expires_after(seconds(plan_.spec.launcher.timeout_s));
    job_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec) on_job_timeout();
    });
  }
  spdlog::info("run {}: {} on {} with {}; logs in {}", run_id_, plural(static_cast<int>(ranks_.size()), "rank"),
               plan_.device, describe_backend(plan_), run_files::logs(plan_.run_dir));
  if (link_) {
    spdlog::info("node {} of {}{}: ranks {}-{} of {}; rendezvous at {}", link_->node(), link_->nnodes(),
                 plan_.nodes_from_slurm ? " (from SLURM)" : "", ranks_.front().record.where.rank,
                 ranks_.back().record.where.rank, ranks_.front().record.where.world_size, link_->endpoint().str());
  }
  live_report_.start();
  start_attempt();
  io_.run();
  return outcome_->exit_code;
}

void Supervisor::start_attempt() {
  ++attempt_;
  phase_ = Phase::kStarting;
  outcome_.reset();
  root_cause_.reset();
  remote_cause_.reset();
  stop_signal_ = 0;
  groups_released_ = false;
  attempt_over_ = false;
  attempt_started_ = SteadyClock::now();
  for (Rank& rank : ranks_) rank = Rank(rank.record.where);
  run_dir_.clear_rank_files(ranks_.front().record.where.world_size);
  stragglers_.new_attempt();

  const int attempts = plan_.spec.launcher.max_restarts + 1;
  const std::string restart = attempt_ > 1 ? fmt::format(" (restart {})", attempt_ - 1) : "";
  const std::string separator = fmt::format("==== xlaunch: attempt {} of {}{} at {}, run {} ====", attempt_, attempts,
                                            restart, iso_time(std::chrono::system_clock::now()), run_id_);
  for (int fd : log_fds_) append_line(fd, separator);
  if (attempt_ > 1) spdlog::info("attempt {} of {}{}: starting {}", attempt_, attempts, restart, plural(ranks_.size(), "rank"));

  if (link_) {
    begin_rendezvous();
    return;
  }
  try {
    launch_ranks(make_attempt_env(plan_, run_id_, attempt_ - 1));
  } catch (const LaunchError& e) {
    attempt_failed_to_start(e);
  }
}

void Supervisor::attempt_failed_to_start(const LaunchError& error) {
  spdlog::error("{}", error.what());
  outcome_ = Outcome{OutcomeKind::kLaunchFailed, error.exit_code(), error.what()};
  phase_ = Phase::kStopping;
  check_attempt_over();
}

void Supervisor::launch_ranks(const AttemptEnv& env) {
  for (Rank& rank : ranks_) {
    if (!spawn(rank, env)) return;  // the failure began the teardown
  }
  phase_ = Phase::kRunning;
  save_state();
}

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

json Supervisor::root_cause_json() const {
  if (root_cause_) return to_json(*root_cause_);
  if (remote_cause_) return *remote_cause_;
  return nullptr;
}

bool Supervisor::spawn(Rank& rank, const AttemptEnv& env) {
  RankRecord& record = rank.record;
  const int id = record.where.rank;
  try {
    rank.stream = std::make_shared<LogStream>(io_, id, log_fds_.at(record.where.local_rank),
                                              teed(id) ? console_ : nullptr, [this] { check_attempt_over(); },
                                              link_ ? link_->node() : -1);
    const SpawnRequest request{plan_.worker_argv, rank_environment(plan_, record.where, env), rank.stream->write_end()};
    rank.process = std::make_unique<RankProcess>(io_, request, [this, id](ExitStatus status) { on_exit(id, status); });
  } catch (const std::exception& e) {  // no pipe or no fork: the machine is out of processes or files
    if (rank.stream) rank.stream->close();
    record.status = RankStatus::kSpawnFailed;
    rank_failed(RankFailure{FailureKind::kSpawn, id, 0, std::nullopt, std::chrono::system_clock::now(), e.what(), {}},
                Outcome{OutcomeKind::kLaunchFailed, exit_code::kLaunchFailure,
                        fmt::format("rank {} could not be started: {}", id, e.what())});
    return false;
  }
  rank.stream->close_write_end();
  rank.stream->start();
  record.pid = rank.process->pid();
  record.status = RankStatus::kRunning;
  record.started = SteadyClock::now();
  if (const auto stat = read_proc_stat(record.pid)) record.start_time = stat->start_time;
  guard_.watch(record.pid);
  if (heartbeat_) heartbeat_->start(id);
  return true;
}

void Supervisor::on_exit(int id, ExitStatus status) {
  Rank& rank = rank_at(id);
  RankRecord& record = rank.record;
  record.exit = status;
  record.ended = SteadyClock::now();
  record.result = read_result_file(result_file_path(plan_.run_dir, id));
  if (!record.result.is_object()) {
    record.result = result_from_record(heartbeat_file_path(plan_.run_dir, id),
                                       rank.stream ? rank.stream->tail() : std::vector<std::string>{});
  }
  if (heartbeat_) heartbeat_->stop(id);
  if (phase_ == Phase::kRunning && !status.ok()) {
    record.status = RankStatus::kFailed;
    RankFailure failure{FailureKind::kExited, id, record.pid, status, std::chrono::system_clock::now(),
                        result_message(record.result), {}};
    Outcome outcome{OutcomeKind::kRankFailed, exit_code::from_outcome(status.exit_code, status.signal),
                    fmt::format("rank {} failed: {}", id, describe(status))};
    if (!is_peer_lost(record.result)) {
      rank_failed(std::move(failure), std::move(outcome));
    } else if (!held_echo_) {
      hold_echo(std::move(failure), std::move(outcome));
    }
    if (held_echo_ && running_count() == 0) settle_echo();  // every rank is gone: nothing more will come
  } else if (record.status == RankStatus::kRunning) {
    record.status = status.ok() ? RankStatus::kSucceeded : RankStatus::kStopped;
  }
  save_state();
  check_attempt_over();
}

void Supervisor::hold_echo(RankFailure failure, Outcome outcome) {
  spdlog::info("rank {} failed: {}, because a peer died (peer_lost); waiting up to {} s for the failure it echoes",
               failure.rank, failure.exit ? describe(*failure.exit) : "?", kEchoWaitS);
  held_echo_.emplace(std::move(failure), std::move(outcome));
  echo_timer_.expires_after(seconds(kEchoWaitS));
  echo_timer_.async_wait([this, attempt = attempt_](const boost::system::error_code& ec) {
    if (!ec && attempt == attempt_) settle_echo();
  });
}

// No primary failure came: the echo is all there is (a peer lost on another node, say).
void Supervisor::settle_echo() {
  if (!held_echo_) return;
  auto [failure, outcome] = std::move(*held_echo_);
  drop_echo();
  rank_failed(std::move(failure), std::move(outcome));
}

void Supervisor::drop_echo() {
  held_echo_.reset();
  echo_timer_.cancel();
}

// Rank 0's beats bring every rank's busy time of its last step (the end-of-step all-reduce gives
// them to rank 0, whose record carries them): they feed the stragglers, so node 0 judges every rank
// of the job, on whichever node, and the other nodes none.
void Supervisor::on_beat(int rank) {
  if (rank != 0) return;
  const std::optional<RankBusyTimes> busy = read_rank_busy_times(heartbeat_file_path(plan_.run_dir, rank));
  if (!busy || busy->last_step <= 0) return;
  const double seen_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  bool changed = false;
  for (size_t r = 0; r < busy->busy_ms.size(); ++r) {
    for (const StragglerDetector::Change& change :
         stragglers_.observe(static_cast<int>(r), busy->last_step, busy->busy_ms[r], seen_s)) {
      if (change.warning) {
        spdlog::warn("{}", change.message);
      } else {
        spdlog::info("{}", change.message);
      }
      changed = true;
    }
  }
  if (changed) save_state();
}

void Supervisor::on_hung(int id) {
  Rank& rank = rank_at(id);
  if (phase_ != Phase::kRunning || !rank.running()) return;
  rank.record.status = RankStatus::kHung;
  const double timeout = plan_.spec.launcher.heartbeat_timeout_s;
  rank_failed(RankFailure{FailureKind::kHung, id, rank.record.pid, std::nullopt, std::chrono::system_clock::now(),
                          fmt::format("no heartbeat for {} s (launcher.heartbeat_timeout_s)", timeout), {}},
              Outcome{OutcomeKind::kRankHung, exit_code::kTimeout,
                      fmt::format("rank {} hung: no heartbeat for {} s", id, timeout)});
}

void Supervisor::rank_failed(RankFailure failure, Outcome outcome) {
  if (phase_ != Phase::kRunning && phase_ != Phase::kStarting) return;  // teardown already under way
  drop_echo();  // a primary failure (or a hang) takes the place of a held echo
  const bool restart = outcome.kind != OutcomeKind::kLaunchFailed && attempt_ <= plan_.spec.launcher.max_restarts;
  failure.node = plan_.spec.nodes.node_rank;
  const bool diagnose = failure.kind == FailureKind::kHung && phase_ == Phase::kRunning;
  if (diagnose) {  // the rank whose clock ran out first is not necessarily the one the others wait for:
                   // the diagnosis names the hung rank (end_diagnosis)
    spdlog::warn("a rank sent no heartbeat for {} s (launcher.heartbeat_timeout_s); finding where every rank is",
                 plan_.spec.launcher.heartbeat_timeout_s);
  } else {
    spdlog::error("{}; {}", outcome.reason, stopping_text(restart));
  }
  root_cause_ = std::move(failure);
  outcome_ = std::move(outcome);
  const Phase next = restart ? Phase::kRestarting : Phase::kStopping;
  if (diagnose) return begin_diagnosis(next, "heartbeat");
  stop_gang(next, SIGTERM);
}

void Supervisor::begin_diagnosis(Phase next, const char* trigger) {
  drop_echo();
  std::vector<HangReport::Target> targets;
  for (const Rank& rank : ranks_) {
    if (rank.running()) targets.push_back({rank.record.where.rank, rank.record.pid});
  }
  diagnosis_ = std::make_unique<HangReport>(plan_.run_dir, targets, trigger);
  phase_ = Phase::kDiagnosing;
  after_diagnosis_ = next;
  diagnosis_deadline_ = SteadyClock::now() + seconds(kBacktraceWaitS);
  save_state();
  poll_diagnosis();
}

void Supervisor::poll_diagnosis() {
  if (diagnosis_->backtraces_complete() || SteadyClock::now() >= diagnosis_deadline_) return end_diagnosis();
  diagnosis_timer_.expires_after(seconds(kBacktracePollS));
  diagnosis_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec && phase_ == Phase::kDiagnosing) poll_diagnosis();
  });
}

// The report is complete (or out of time): log it, let it name the rank behind, then stop.
void Supervisor::end_diagnosis() {
  diagnosis_timer_.cancel();
  diagnosis_->collect_backtraces();
  hang_report_ = diagnosis_->to_json();
  hang_report_["attempt"] = attempt_;
  const std::string summary = summarize(diagnosis_->ranks());
  const std::vector<int> behind = ranks_behind(diagnosis_->ranks());
  diagnosis_.reset();
  if (root_cause_ && root_cause_->kind == FailureKind::kHung && !summary.empty()) {
    // The watchdog fires for whichever rank's clock runs out first; the rank the others wait for
    // is the cause.
    if (behind.size() == 1 && behind.front() != root_cause_->rank) {
      Rank& watched = rank_at(root_cause_->rank);
      if (watched.record.status == RankStatus::kHung) watched.record.status = RankStatus::kRunning;
      Rank& stuck = rank_at(behind.front());
      stuck.record.status = RankStatus::kHung;
      root_cause_->rank = behind.front();
      root_cause_->pid = stuck.record.pid;
      outcome_->reason = fmt::format("rank {} hung: no heartbeat for {} s", behind.front(),
                                     plan_.spec.launcher.heartbeat_timeout_s);
    }
    root_cause_->message += "; " + summary;
  }
  if (root_cause_ && root_cause_->kind == FailureKind::kHung) {
    spdlog::error("{}; {}", outcome_->reason, stopping_text(after_diagnosis_ == Phase::kRestarting));
  }
  if (!summary.empty()) spdlog::error("where the ranks are: {}", summary);
  stop_gang(after_diagnosis_, SIGTERM);
}

std::string Supervisor::stopping_text(bool restart) const {
  return fmt::format("stopping {} (SIGTERM, then SIGKILL after {} s){}", plural(running_count(), "running rank"),
                     plan_.spec.launcher.term_timeout_s,
                     restart ? fmt::format(", then restarting ({} of {})", attempt_, plan_.spec.launcher.max_restarts)
                             : "");
}

void Supervisor::on_signal(int sig) {
  if (phase_ == Phase::kFinished) return;
  if (sig == SIGUSR1 || sig == SIGUSR2) {
    spdlog::info("received {}; forwarding it to every rank's process group", signal_name(sig));
    signal_groups(sig);
    return;
  }
  if (signaled_with_ranks(sig)) return;
  if (sig == SIGTERM && phase_ == Phase::kRunning && plan_.spec.launcher.preempt_grace_s > 0) {
    begin_preemption(sig);
    return;
  }
  if (sig == SIGINT && ++interrupts_ >= 2) {
    spdlog::warn("second SIGINT: killing every rank now");
    kill_stragglers();
    return;
  }
  // A hang-up (the terminal closed) stops the ranks as SIGTERM does, so that they can end cleanly.
  const int forward = sig == SIGHUP ? SIGTERM : sig;
  if (phase_ == Phase::kDiagnosing) {  // the outcome is decided: report with what there is, then stop
    end_diagnosis();
    signal_groups(forward);
    return;
  }
  if (phase_ == Phase::kStopping) {  // the outcome is decided; pass the signal on
    signal_groups(forward);
    return;
  }
  outcome_ = Outcome{OutcomeKind::kSignal, exit_code::kSignalBase + sig, "xlaunch received " + signal_name(sig)};
  spdlog::warn("received {}; {} {} and stopping (SIGKILL after {} s)", signal_name(sig),
               forward == sig ? "forwarding it to" : "sending " + signal_name(forward) + " to",
               plural(running_count(), "running rank"), plan_.spec.launcher.term_timeout_s);
  if (phase_ == Phase::kRestarting) {  // the gang is already stopping: just do not restart
    phase_ = Phase::kStopping;
    signal_groups(forward);
    save_state();
    return;
  }
  stop_gang(Phase::kStopping, forward);
}

// launcher.preempt_grace_s: a SIGTERM (a Kubernetes eviction, a scheduler's preemption) first asks
// every rank to checkpoint at its next step boundary and exit, by xtrain-worker's stop request
// (SIGUSR1, which rides on the step's all-reduce to every rank of every node), and stops the gang
// the usual way only if the grace period ends first. A second signal stops it at once (on_signal).
void Supervisor::begin_preemption(int sig) {
  const double grace = plan_.spec.launcher.preempt_grace_s;
  outcome_ = Outcome{OutcomeKind::kSignal, exit_code::kSignalBase + sig, "xlaunch received " + signal_name(sig)};
  preempting_ = true;
  spdlog::warn("received {}; asking {} to checkpoint at the next step and exit (SIGUSR1); stopping them after "
               "{} s (launcher.preempt_grace_s) if they have not",
               signal_name(sig), plural(running_count(), "running rank"), grace);
  drop_echo();
  phase_ = Phase::kStopping;
  stop_signal_ = SIGUSR1;
  signal_groups(SIGUSR1);
  kill_timer_.expires_after(seconds(grace));
  kill_timer_.async_wait([this, attempt = attempt_, sig, grace](const boost::system::error_code& ec) {
    if (ec || attempt != attempt_ || running_count() == 0) return;
    spdlog::warn("{} still running {} s after the checkpoint request; stopping them",
                 plural(running_count(), "rank"), grace);
    stop_gang(Phase::kStopping, sig);
  });
  save_state();
}

// Every rank exited 0 after writing its checkpoint on a stop request (its result says "preempted").
bool Supervisor::every_rank_preempted() const {
  for (const Rank& rank : ranks_) {
    const json& result = rank.record.result;
    if (!rank.record.exit || !rank.record.exit->ok() || !result.is_object() ||
        result.value("status", "") != "preempted") {
      return false;
    }
  }
  return true;
}

// A rank killed by the very signal xlaunch receives a moment later (kJobSignalWindowS) is not the
// root cause; the signal is. Returns true when it took this failure's place.
bool Supervisor::signaled_with_ranks(int sig) {
  if (!job_signal_wait_left() || root_cause_->exit->signal != sig) return false;
  if (phase_ != Phase::kStopping && phase_ != Phase::kRestarting) return false;
  spdlog::warn("received {} right after rank {} was killed by it: the whole job was signalled (scancel?); "
               "stopping without restarting", signal_name(sig), root_cause_->rank);
  outcome_ = Outcome{OutcomeKind::kSignal, exit_code::kSignalBase + sig, "xlaunch received " + signal_name(sig)};
  root_cause_.reset();
  phase_ = Phase::kStopping;
  signal_groups(sig);
  save_state();
  if (awaiting_job_signal_) {  // every rank had gone already: the attempt ends now, as stopped
    job_signal_timer_.cancel();
    wrap_up_attempt();
  }
  return true;
}

// How much longer the signal that killed the root-cause rank may take to reach xlaunch too
// (kJobSignalWindowS); nullopt when the root cause is not such a rank or the window has passed.
std::optional<std::chrono::steady_clock::duration> Supervisor::job_signal_wait_left() const {
  if (!outcome_ || outcome_->kind != OutcomeKind::kRankFailed || !root_cause_ || !root_cause_->exit) return std::nullopt;
  const int sig = root_cause_->exit->signal;
  if (sig != SIGTERM && sig != SIGINT && sig != SIGHUP) return std::nullopt;
  const auto left = seconds(kJobSignalWindowS) - std::chrono::duration_cast<SteadyClock::duration>(
                                                     std::chrono::system_clock::now() - root_cause_->time);
  if (left <= SteadyClock::duration::zero()) return std::nullopt;
  return left;
}

void Supervisor::on_job_timeout() {
  if (phase_ == Phase::kStopping || phase_ == Phase::kFinished || phase_ == Phase::kDiagnosing) return;
  const double limit = plan_.spec.launcher.timeout_s;
  outcome_ = Outcome{OutcomeKind::kJobTimeout, exit_code::kTimeout,
                     fmt::format("the job ran longer than launcher.timeout_s = {} s", limit)};
  spdlog::error("{}; stopping {} (SIGTERM, then SIGKILL after {} s)", outcome_->reason,
                plural(running_count(), "running rank"), plan_.spec.launcher.term_timeout_s);
  if (phase_ == Phase::kRestarting) {
    phase_ = Phase::kStopping;
    save_state();
    return;
  }
  if (phase_ == Phase::kRunning) {
    begin_diagnosis(Phase::kStopping, "job_timeout");
    return;
  }
  stop_gang(Phase::kStopping, SIGTERM);
}

void Supervisor::stop_gang(Phase next, int sig, bool announce) {
  drop_echo();
  phase_ = next;
  stop_signal_ = sig;
  cancel_rendezvous_ = true;
  if (announce && round_met_) {
    const json record = {{"node", link_->node()},
                         {"outcome",
                          {{"status", outcome_name(outcome_->kind)},
                           {"exit_code", outcome_->exit_code},
                           {"reason", outcome_->reason}}},
                         {"root_cause", root_cause_json()},
                         {"restart", next == Phase::kRestarting}};
    try {
      if (!link_->publish_stop(attempt_, record)) spdlog::info("another node had already stopped the job");
    } catch (const std::exception& e) {
      spdlog::error("cannot tell the other nodes to stop: {}", e.what());
    }
  }
  signal_groups(sig);
  signal_groups(SIGCONT);  // a stopped rank (SIGSTOP) acts on the signal now, not at SIGKILL time
  if (heartbeat_) {
    for (const Rank& rank : ranks_) heartbeat_->stop(rank.record.where.rank);
  }
  kill_timer_.expires_after(seconds(plan_.spec.launcher.term_timeout_s));
  kill_timer_.async_wait([this, attempt = attempt_](const boost::system::error_code& ec) {
    if (!ec && attempt == attempt_) kill_stragglers();
  });
  save_state();
  check_attempt_over();
}

void Supervisor::kill_stragglers() {
  for (const Rank& rank : ranks_) {
    if (!rank.running()) continue;
    spdlog::warn("rank {} (pid {}) still running {} s after {}; sending SIGKILL to its process group",
                 rank.record.where.rank, rank.record.pid, plan_.spec.launcher.term_timeout_s,
                 signal_name(stop_signal_));
  }
  signal_groups(SIGKILL);
}

// Every group of this attempt, including those whose rank already exited: their children live there.
void Supervisor::signal_groups(int sig) {
  if (groups_released_) return;
  for (const Rank& rank : ranks_) {
    if (rank.process) ::killpg(rank.record.pid, sig);
  }
}

void Supervisor::check_attempt_over() {
  if (attempt_over_ || phase_ == Phase::kDiagnosing) return;  // end_diagnosis comes back here
  for (const Rank& rank : ranks_) {
    if (rank.running()) return;
  }
  if (!groups_released_) {
    kill_timer_.cancel();
    const long step = ranks_.front().record.result.is_object() ? ranks_.front().record.result.value("step", 0L) : 0;
    if (phase_ == Phase::kRunning) {
      outcome_ = every_rank_preempted()
                     ? Outcome{OutcomeKind::kPreempted, exit_code::kSuccess,
                               fmt::format("every rank checkpointed step {} on a stop request (SIGUSR1) and exited 0", step)}
                     : Outcome{OutcomeKind::kSucceeded, exit_code::kSuccess, "every rank exited 0"};
      phase_ = Phase::kStopping;
    } else if (preempting_ && every_rank_preempted()) {
      outcome_ = Outcome{OutcomeKind::kPreempted, outcome_->exit_code,
                         fmt::format("{}: every rank checkpointed step {} and exited 0 within launcher.preempt_grace_s",
                                     outcome_->reason, step)};
    }
    signal_groups(SIGKILL);  // whatever the ranks left behind in their groups
    groups_released_ = true;
    for (const Rank& rank : ranks_) {
      if (rank.process) guard_.release(rank.record.pid);
    }
    drain_timer_.expires_after(seconds(kDrainSeconds));
    drain_timer_.async_wait([this, attempt = attempt_](const boost::system::error_code& ec) {
      if (ec || attempt != attempt_ || attempt_over_) return;
      for (Rank& rank : ranks_) {
        if (!rank.stream || !rank.stream->is_open()) continue;
        spdlog::warn("rank {}: output still open {} s after its process group was killed (a process left the "
                     "group); closing it",
                     rank.record.where.rank, kDrainSeconds);
        rank.stream->close();
      }
      check_attempt_over();
    });
  }
  for (const Rank& rank : ranks_) {
    if (rank.stream && rank.stream->is_open()) return;
  }
  drain_timer_.cancel();
  end_attempt();
}

void Supervisor::end_attempt() {
  attempt_over_ = true;
  if (const auto left = job_signal_wait_left()) {  // signaled_with_ranks() may still make it a stop
    awaiting_job_signal_ = true;
    job_signal_timer_.expires_after(*left);
    job_signal_timer_.async_wait([this](const boost::system::error_code& ec) {
      if (!ec && awaiting_job_signal_) wrap_up_attempt();
    });
    return;
  }
  wrap_up_attempt();
}

void Supervisor::wrap_up_attempt() {
  awaiting_job_signal_ = false;
  if (round_met_) return close_round();  // on_round_closed() concludes it
  conclude_attempt();
}

void Supervisor::conclude_attempt() {
  if (remote_cause_) spdlog::error("root cause on another node: {}", outcome_->reason);
  if (root_cause_) {
    const Rank& rank = rank_at(root_cause_->rank);
    if (rank.stream) root_cause_->log_tail = rank.stream->tail();
    const auto lines = report_lines(*root_cause_);
    spdlog::error("{}", lines.front());
    for (size_t i = 1; i < lines.size(); ++i) spdlog::info("{}", lines[i]);
    const auto& tail = root_cause_->log_tail;
    if (!plan_.python.empty() && std::any_of(tail.begin(), tail.end(), [](const std::string& line) {
          return line.find("ModuleNotFoundError") != std::string::npos;
        })) {
      spdlog::error("rank {} ran {} with {}, which lacks a module it imports; {} chooses the interpreter (else "
                    "python3 from PATH)",
                    root_cause_->rank, plan_.python_program, plan_.python, torchrun::kPythonVariable);
    }
  }
  attempt_history_.push_back({{"attempt", attempt_},
                              {"duration_s", seconds_between(attempt_started_, SteadyClock::now())},
                              {"status", outcome_name(outcome_->kind)},
                              {"exit_code", outcome_->exit_code},
                              {"reason", outcome_->reason},
                              {"root_cause", root_cause_json()}});
  for (Rank& rank : ranks_) {
    rank.process.reset();
    rank.stream.reset();
  }
  if (phase_ == Phase::kRestarting) {
    start_attempt();
  } else {
    finish();
  }
}

void Supervisor::finish() {
  phase_ = Phase::kFinished;
  join_helpers();
  // The summary first: on a full disk it takes the reserve the run dir kept for it.
  bool summary_written = true;
  try {
    run_dir_.write_summary(summary_json());
  } catch (const std::exception& e) {
    spdlog::error("cannot write the summary: {}", e.what());
    summary_written = false;
  }
  write_state_now();
  live_report_.finish();
  const Outcome& outcome = *outcome_;
  spdlog::info("job {} after {:.3f} s, {}: {}; xlaunch exits {}; {}", outcome_name(outcome.kind),
               seconds_between(started_, SteadyClock::now()), plural(attempt_, "attempt"), outcome.reason,
               outcome.exit_code,
               summary_written ? "summary in " + run_files::summary(plan_.run_dir) : std::string("no summary.json"));
  boost::system::error_code ignored;
  signals_.cancel(ignored);
  job_timer_.cancel();
  io_.stop();
}

void Supervisor::wait_for_signal() {
  signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
    if (ec) return;
    on_signal(sig);
    if (phase_ != Phase::kFinished) wait_for_signal();
  });
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
          {"attempt_history", attempt_history_}};
}

bool Supervisor::teed(int rank) const {
  const std::string& tee = plan_.spec.launcher.tee;
  return tee == "all" || (tee == "rank0" && rank == 0);
}

int Supervisor::running_count() const {
  int n = 0;
  for (const Rank& rank : ranks_) n += rank.running() ? 1 : 0;
  return n;
}

}  // namespace xtrain::launcher
