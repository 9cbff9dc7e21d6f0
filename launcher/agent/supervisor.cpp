// The supervisor's attempts: starting the ranks, their exits, beats and failures, the end of an
// attempt and of the run. Stops, signals and hang reports are in supervisor_stop.cpp, the rounds of
// several nodes in supervisor_nodes.cpp, state.json and summary.json in supervisor_state.cpp.
#include "launcher/agent/supervisor.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include "common/exit_codes.hpp"
#include "common/gpu/nccl_id.hpp"
#include "common/heartbeat_record.hpp"
#include "launcher/agent/supervisor_detail.hpp"
#include "launcher/cli/torchrun.hpp"
#include "launcher/process/proc_info.hpp"
#include "launcher/rendezvous/attempt.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/python_failure.hpp"

namespace xtrain::launcher {
using namespace supervisor_detail;
namespace {

// After every rank was reaped and its group SIGKILLed, output can stay open only if some
// process left its group (setsid). Wait this long for it, then stop reading.
constexpr double kDrainSeconds = 0.3;
// How long a peer_lost failure waits for the primary failure it echoes (the primary rank may take
// a moment to exit after its connections closed, or to be reaped).
constexpr double kEchoWaitS = 2.0;

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
  const auto failure = static_cast<RecordedFailure>(record->failure);
  json result = {{"status", "failed"},
                 {"failure_kind", failure == RecordedFailure::kPeerLost   ? "peer_lost"
                                  : failure == RecordedFailure::kDiverged ? "diverged"
                                                                          : "primary"},
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

// The worker says what kind of failure it had (worker/main.cpp: failure_kind): the echo of a peer's,
// or training that diverged, which a restart would repeat (it resumes bit-exactly).
bool is_peer_lost(const json& result) {
  return result.is_object() && result.value("failure_kind", json()) == "peer_lost";
}
bool is_diverged(const json& result) {
  return result.is_object() && result.value("failure_kind", json()) == "diverged";
}

std::string result_message(const json& result) {
  if (!result.is_object()) return "";
  if (auto it = result.find("error"); it != result.end()) return it->is_string() ? it->get<std::string>() : it->dump();
  if (auto it = result.find("unreadable"); it != result.end()) return "unreadable: " + it->get<std::string>();
  return "";
}

}  // namespace

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
    if (heartbeat_s > 0) launch_failure(e.what());
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
  if (!env.nccl_id_hex.empty() && plan_.interpret) {  // the ranks' TMPDIR, worker.env's or ours
    const auto vars = rank_environment(plan_, ranks_.front().record.where, env);
    const auto tmp = vars.find("TMPDIR");
    interpret_meeting_ = interpret_nccl_meeting_dir(env.nccl_id_hex, tmp != vars.end() ? tmp->second.c_str() : nullptr);
  }
  for (Rank& rank : ranks_) {
    if (!spawn(rank, env)) return;  // the failure began the teardown
  }
  phase_ = Phase::kRunning;
  save_state();
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
  if (record.result.is_null()) record.result = read_elastic_error_file(elastic_error_file_path(plan_.run_dir, id));
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
    // Stopping: a rank the stop ended is "stopped"; one that exited with a code of its own and a
    // recorded failure failed by itself (every rank of a diverged step does, as the first one).
    const bool own_failure =
        !status.signal && record.result.is_object() && record.result.value("status", "") == "failed";
    record.status = status.ok() ? RankStatus::kSucceeded : own_failure ? RankStatus::kFailed : RankStatus::kStopped;
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
  const bool restarts_left = outcome.kind != OutcomeKind::kLaunchFailed && attempt_ <= plan_.spec.launcher.max_restarts;
  const bool repeats = failure.kind == FailureKind::kExited && is_diverged(rank_at(failure.rank).record.result);
  const bool restart = restarts_left && !repeats;
  const bool await_others = repeats && running_count() > 0;  // they diverge at the same step: await_diverged_ranks
  failure.node = plan_.spec.nodes.node_rank;
  const bool diagnose = failure.kind == FailureKind::kHung && phase_ == Phase::kRunning;
  if (diagnose) {  // the rank whose clock ran out first is not necessarily the one the others wait for:
                   // the diagnosis names the hung rank (end_diagnosis)
    spdlog::warn("a rank sent no heartbeat for {} s (launcher.heartbeat_timeout_s); finding where every rank is",
                 plan_.spec.launcher.heartbeat_timeout_s);
  } else {
    spdlog::error("{}; {}{}", outcome.reason,
                  await_others
                      ? fmt::format("training diverged at a step every rank takes: waiting up to {} s for the {} to "
                                    "end by themselves (then SIGTERM, and SIGKILL after {} s)",
                                    kDivergedWaitS, plural(running_count(), "running rank"),
                                    plan_.spec.launcher.term_timeout_s)
                      : stopping_text(restart),
                  restarts_left && repeats ? "; no restart: training diverged, and a restart would resume from "
                                             "the last checkpoint and repeat it bit for bit"
                                           : "");
  }
  root_cause_ = std::move(failure);
  outcome_ = std::move(outcome);
  const Phase next = restart ? Phase::kRestarting : Phase::kStopping;
  if (diagnose) return begin_diagnosis(next, "heartbeat");
  if (await_others) return await_diverged_ranks();
  stop_gang(next, SIGTERM);
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
    // A Python rank that reported nothing itself: its traceback's exception, from its output. Only
    // for exit code 1, Python's after an uncaught exception's traceback: a rank that a signal
    // killed, or that chose its code, may have printed a traceback it handled before.
    const std::optional<ExitStatus>& ended = root_cause_->exit;
    if (root_cause_->message.empty() && ended && ended->signal == 0 && ended->exit_code == 1) {
      root_cause_->message = python_exception(root_cause_->log_tail);
    }
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
  remove_interpret_meeting();
  if (phase_ == Phase::kRestarting) {
    start_attempt();
  } else {
    finish();
  }
}

// Interpreted NCCL ranks remove their meeting directory as they end; ranks killed by a signal
// (a stop, a hang, a timeout) cannot. Every rank of the attempt has exited, and its id is never
// used again.
void Supervisor::remove_interpret_meeting() {
  if (!interpret_meeting_) return;
  const std::filesystem::path dir = *std::exchange(interpret_meeting_, std::nullopt);
  std::error_code error;
  const auto removed = std::filesystem::remove_all(dir, error);
  if (error) {
    spdlog::warn("could not remove {} (interpret mode's NCCL files of stopped ranks): {}", dir.string(),
                 error.message());
  } else if (removed > 0) {
    spdlog::info("removed {}: interpret mode's NCCL files of ranks that were stopped", dir.string());
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
