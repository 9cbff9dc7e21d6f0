// The supervisor: one asio event loop that takes a job's ranks through its attempts.
//
//   Starting --> Running -----------------> Stopping --> Finished
//                   |   \                       ^
//                   |    +--> Diagnosing -------+    (a hang or the job timeout: where every rank
//                   |              |                  is gets recorded before the stop begins;
//                   v              v                  launcher/agent/hang_report.hpp)
//               Restarting <-------+                 (a rank failed or hung, restarts left)
//                   |                                 (a signal or the job timeout meanwhile: Stopping)
//                   v
//               Starting
//
// Events, none of them polled: a rank exits (Boost.Process), a rank's output ends (pipe EOF), a
// heartbeat deadline passes (inotify + timers), a signal arrives (signal_set), the job timeout
// or the SIGTERM grace period ends (timers); the one poll is the hang report's bounded wait for
// backtrace files. The first rank to fail while Running is the root
// cause; everything after it is teardown. An attempt is over when every rank is reaped, every
// rank's process group is killed, and every rank's output is drained.
//
// A failure that a worker reports as "peer_lost" (a collective failed because a peer died) is the
// echo of another failure: it is held for up to kEchoWaitS while the primary failure is looked
// for, and becomes the root cause only when none appears. A "diverged" failure (training whose loss
// or gradient norm stopped being finite) is not restarted: the restart would resume from the last
// checkpoint and repeat it bit for bit; and since every rank takes that step, the others are given
// kDivergedWaitS to end by themselves, each with its own failure, before the stop. Every heartbeat
// brings the rank's progress record, whose busy time feeds the straggler detector
// (launcher/agent/stragglers.hpp).
//
// On several nodes (launcher/rendezvous/rendezvous.hpp) Starting begins with a rendezvous round on a helper
// thread, which posts its result to the loop; while ranks run, a watcher thread blocks on this
// node's stop key in node 0's store and posts what it reads: another node's root cause (the gang
// stops here too, with that cause) or the store's loss (node 0 is gone). A decisive local event
// publishes the stop for every node. At the end of each attempt the nodes exchange outcomes (on
// the helper thread: the loop keeps running), so that every xlaunch reports the same root cause
// and makes the same restart decision. A node lost mid-attempt reaches the watcher too: node 0's
// store publishes its loss as the root cause (launcher/rendezvous/rendezvous.hpp).
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "launcher/agent/hang_report.hpp"
#include "launcher/agent/stragglers.hpp"
#include "launcher/plan/plan.hpp"
#include "launcher/process/console.hpp"
#include "launcher/process/guard.hpp"
#include "launcher/process/heartbeat.hpp"
#include "launcher/process/log_stream.hpp"
#include "launcher/process/rank_process.hpp"
#include "launcher/rendezvous/rendezvous.hpp"
#include "launcher/report/live_report.hpp"
#include "launcher/run/launch_error.hpp"
#include "launcher/run/outcome.hpp"
#include "launcher/run/run_dir.hpp"

namespace xtrain::launcher {

// SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2: blocked from startup until the supervisor's
// handlers exist, so that a signal that arrives early (an immediate `xlaunch stop`) waits instead
// of killing.
void block_handled_signals(bool block);

// A SIGINT, SIGTERM, SIGHUP or SIGQUIT that arrived while they were blocked and no supervisor took
// it (a --check, a --dry-run, a plan that failed): taken from the pending set and returned, so that
// xlaunch still ends with 128+N. nullopt when none is pending.
std::optional<int> take_pending_stop_signal();

class Supervisor {
 public:
  // `console` null: detached, nothing goes to the terminal.
  Supervisor(const Plan& plan, RunDir& run_dir, Console* console, Guard& guard);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  int run();  // blocks until Finished; returns xlaunch's exit code

 private:
  enum class Phase { kStarting, kRunning, kDiagnosing, kStopping, kRestarting, kFinished };

  struct Rank {
    explicit Rank(const RankPlacement& where) { record.where = where; }
    RankRecord record;
    std::unique_ptr<RankProcess> process;  // null: not started this attempt
    std::shared_ptr<LogStream> stream;
    bool running() const { return process && !record.exit; }
  };

  // Attempt lifecycle.
  void start_attempt();
  void launch_ranks(const AttemptEnv& env);
  void attempt_failed_to_start(const LaunchError& error);
  bool spawn(Rank& rank, const AttemptEnv& env);
  void stop_gang(Phase next, int signal, bool announce = true);
  void kill_stragglers();
  void check_attempt_over();
  void end_attempt();
  void wrap_up_attempt();
  void conclude_attempt();
  void remove_interpret_meeting();
  void finish();

  // Events.
  void on_exit(int index, ExitStatus status);
  void on_hung(int index);
  void on_beat(int rank);
  void on_signal(int signal);
  bool signaled_with_ranks(int signal);
  std::optional<std::chrono::steady_clock::duration> job_signal_wait_left() const;
  void begin_preemption(int signal);
  bool every_rank_preempted() const;
  void await_diverged_ranks();
  void on_job_timeout();
  void rank_failed(RankFailure failure, Outcome outcome);
  std::string stopping_text(bool restart) const;  // "stopping 4 running ranks (SIGTERM, then SIGKILL after 2 s)"

  // A peer_lost failure waits for the primary one.
  void hold_echo(RankFailure failure, Outcome outcome);
  void settle_echo();
  void drop_echo();

  // Hangs and the job timeout: where every rank is, before the stop.
  void begin_diagnosis(Phase next, const char* trigger);
  void poll_diagnosis();
  void end_diagnosis();

  // Several nodes.
  void begin_rendezvous();
  void on_rendezvous(int attempt, std::optional<RoundResult> round, const std::string& error);
  void on_remote_stop(int attempt, const nlohmann::json& record);
  void on_store_lost(int attempt, const std::string& error);
  void adopt_remote_stop(const nlohmann::json& record);
  void close_round();
  void on_round_closed(const std::optional<NodeLink::Closing>& closing, const std::string& error, double timeout_s);
  void join_helpers();
  nlohmann::json root_cause_json() const;

  void wait_for_signal();
  void signal_groups(int signal);
  void save_state();
  void write_state_now();
  nlohmann::json state_json() const;
  nlohmann::json summary_json() const;
  bool teed(int rank) const;
  int running_count() const;
  Rank& rank_at(int rank) { return ranks_.at(rank - ranks_.front().record.where.rank); }
  static const char* phase_name(Phase phase);

  boost::asio::io_context io_;  // first: destroyed last, after everything that holds handlers
  const Plan& plan_;
  RunDir& run_dir_;
  Console* console_;
  Guard& guard_;
  std::vector<int> log_fds_;  // logs/rank-R.log, open for the whole run
  std::vector<Rank> ranks_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer job_timer_;   // launcher.timeout_s
  boost::asio::steady_timer kill_timer_;  // launcher.term_timeout_s after the stop signal
  boost::asio::steady_timer drain_timer_; // output still open after every rank was reaped
  boost::asio::steady_timer echo_timer_;  // how long a peer_lost failure waits for the primary one
  boost::asio::steady_timer diagnosis_timer_;
  boost::asio::steady_timer job_signal_timer_;  // every rank is gone: xlaunch's own stop signal may still come
  std::unique_ptr<HeartbeatWatch> heartbeat_;  // null: no watchdog and not our worker (or inotify failed)
  LiveReport live_report_;                // report.html: every 10 s while metrics change, and at the end

  Phase phase_ = Phase::kStarting;
  int attempt_ = 0;                 // 1-based
  bool groups_released_ = false;    // this attempt's groups were killed and handed back
  bool attempt_over_ = false;
  bool awaiting_job_signal_ = false;  // the attempt is over, its conclusion waits on job_signal_timer_
  int stop_signal_ = 0;             // the signal sent to begin this attempt's stop
  int interrupts_ = 0;              // SIGINTs received; the second kills at once
  bool preempting_ = false;         // a SIGTERM under launcher.preempt_grace_s: the ranks checkpoint first
  std::optional<Outcome> outcome_;  // this attempt's, set by its first decisive event
  std::optional<RankFailure> root_cause_;   // a rank of this node
  std::optional<nlohmann::json> remote_cause_;  // or another node's root cause, as it reported it
  std::optional<std::pair<RankFailure, Outcome>> held_echo_;  // a peer_lost failure, waiting
  std::unique_ptr<HangReport> diagnosis_;  // while Diagnosing
  Phase after_diagnosis_ = Phase::kStopping;
  SteadyTime diagnosis_deadline_;
  nlohmann::json hang_report_;             // summary.json's "hang_report": the last attempt's that had one, or null
  StragglerDetector stragglers_;
  std::string run_id_;
  WallTime started_at_;
  SteadyTime started_;
  SteadyTime attempt_started_;
  nlohmann::json attempt_history_ = nlohmann::json::array();
  bool state_write_pending_ = false;
  bool state_error_reported_ = false;

  std::unique_ptr<NodeLink> link_;     // several nodes only
  std::thread rendezvous_thread_;     // the round's join, later its end-of-attempt exchange
  std::thread watcher_thread_;
  std::atomic<bool> cancel_rendezvous_{false};
  bool round_met_ = false;             // this attempt's round succeeded: close_round() is due
  // CUDA interpret mode with NCCL: where this attempt's ranks meet (interpret_nccl_meeting_dir)
  std::optional<std::filesystem::path> interpret_meeting_;
};

}  // namespace xtrain::launcher
