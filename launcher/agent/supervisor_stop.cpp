// How the supervisor stops a gang: signals (its own and forwarded ones), preemption, the job
// timeout, the hang report taken before a stop, and the SIGTERM-then-SIGKILL of every process group.
#include "launcher/agent/supervisor.hpp"

#include <algorithm>
#include <chrono>

#include <csignal>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/exit_codes.hpp"
#include "launcher/agent/supervisor_detail.hpp"

namespace xtrain::launcher {
using namespace supervisor_detail;
using exit_code::signal_name;
namespace {

// How long a hang report waits for the backtraces it asked for, and how often it looks.
constexpr double kBacktraceWaitS = 1.0;
constexpr double kBacktracePollS = 0.02;
// scancel (SLURM's proctrack signals every process of the step) and a terminal's Ctrl-C without job
// control signal the ranks and xlaunch together, in no set order: a rank killed by such a signal may
// be reaped, and the whole attempt end, before xlaunch's own copy is handled. It is waited for this
// long after the rank died before the rank is reported as the failure.
constexpr double kJobSignalWindowS = 1.0;

// The outcome of a run that xlaunch's own signal stopped: 128+N.
Outcome stopped_by(int sig) {
  return Outcome{OutcomeKind::kSignal, exit_code::kSignalBase + sig, "xlaunch received " + signal_name(sig)};
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
  for (int sig : kStopSignals) {
    if (sigismember(&pending, sig) != 1) continue;
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    const timespec now = {0, 0};
    if (sigtimedwait(&one, nullptr, &now) == sig) return sig;
  }
  return std::nullopt;
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
    signal_groups(SIGKILL);  // not kill_stragglers: its lines say the term timeout ran out
    return;
  }
  // A hang-up (the terminal closed) or a Ctrl-\ stops the ranks as SIGTERM does, so that they can
  // end cleanly (a rank's SIGQUIT would dump its core).
  const int forward = sig == SIGHUP || sig == SIGQUIT ? SIGTERM : sig;
  if (phase_ == Phase::kDiagnosing) {  // the outcome is decided: report with what there is, then stop
    end_diagnosis();
    signal_groups(forward);
    return;
  }
  if (phase_ == Phase::kStopping) {  // the outcome is decided; pass the signal on
    signal_groups(forward);
    return;
  }
  outcome_ = stopped_by(sig);
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
  outcome_ = stopped_by(sig);
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

// A diverged step's loss and gradient norm are the same on every rank (both are reduced over the
// ranks), so every rank fails with it (exit 3) a moment after the first; stopped at once, the
// slower ones would die by SIGTERM before they said so. They get kDivergedWaitS to end by
// themselves, then the usual stop. A signal meanwhile is passed on (on_signal, Stopping).
void Supervisor::await_diverged_ranks() {
  drop_echo();
  phase_ = Phase::kStopping;
  kill_timer_.expires_after(seconds(kDivergedWaitS));
  kill_timer_.async_wait([this, attempt = attempt_](const boost::system::error_code& ec) {
    if (ec || attempt != attempt_ || running_count() == 0) return;
    spdlog::warn("{} still running {} s after training diverged; stopping them", plural(running_count(), "rank"),
                 kDivergedWaitS);
    stop_gang(Phase::kStopping, SIGTERM);
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
  outcome_ = stopped_by(sig);
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
  if (std::find(std::begin(kStopSignals), std::end(kStopSignals), sig) == std::end(kStopSignals)) {
    return std::nullopt;
  }
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

}  // namespace xtrain::launcher
