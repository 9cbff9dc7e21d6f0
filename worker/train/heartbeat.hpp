// This rank's heartbeat file: a touch per step for xlaunch's watchdog, and the progress record
// (common/heartbeat_record.hpp) kept current in a shared mapping of the same file. Updating the
// record is a handful of plain stores and a vDSO clock read: phase changes cost no system call,
// so the training loop marks every layer.
//
// Threads: the training thread owns the record's seqlocked fields; the communication thread
// stores only comm_bucket (set_comm_bucket), an aligned 32-bit word outside the seqlock, and only
// after set_plan (which may map the file anew).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/heartbeat_record.hpp"

namespace xtrain {

// What one finished optimizer step measured: the training loop fills it, the heartbeat record
// and the run report (worker/train/run_report.hpp) publish it.
struct StepStats {
  long step = 0;             // 1-based: optimizer steps done
  double loss = 0;           // mean training loss of this step, over all ranks
  double lr = 0;
  double grad_norm = 0;      // global norm before clipping
  double step_ms = 0;        // wall time of this step
  double busy_ms = 0;        // this rank's step time minus its time blocked in collectives
  std::vector<double> rank_busy_ms;  // every rank's busy_ms, by rank (rank 0 only; else empty)
};

class Heartbeat {
 public:
  // Maps `path` (created, sized to one record). An empty path, or a file that cannot be mapped,
  // keeps the record in private memory: every call still works and costs the same.
  explicit Heartbeat(const std::string& path);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Touches the file (mtime = now): the beat the watchdog waits for. One futimens.
  void beat() const;

  void set_backtrace_signal(int signal);
  // `rank_busy_slots`: rank 0 passes the world size, and the file grows by that many floats that
  // end_step fills with every rank's busy time (common/heartbeat_record.hpp); others pass 0.
  void set_plan(long total_steps, int micro_steps, int n_layer, int rank_busy_slots = 0);
  void begin_step(long step);  // micro-step 0, phase kData
  void micro_step(int micro);  // phase kData
  void phase(WorkerPhase phase, int detail = -1);
  // The step's loss and times, with the recent throughput and the time left to train.steps.
  void end_step(const StepStats& stats, double tokens_per_s, double eta_s);
  void set_comm_bucket(int bucket);  // communication thread
  void set_failure(RecordedFailure failure);  // as the rank fails, before its result file

  const HeartbeatRecord& record() const { return *record_; }

 private:
  void begin_update();
  void end_update(std::int64_t now_ns);  // stamps updated_ns

  std::string path_;
  int fd_ = -1;
  HeartbeatRecord* record_ = nullptr;  // the mapping, or private_
  size_t mapped_bytes_ = 0;            // 0: private_
  float* rank_busy_ = nullptr;         // record_->rank_busy_count floats after the record in the mapping
  HeartbeatRecord private_{};
};

// Beats from a thread of its own until destroyed, for a wait that another rank's beats vouch for:
// the ranks in the barrier while rank 0 writes a checkpoint, which beats as it writes
// (common/work_progress.hpp). A long write then does not make them look hung to
// the watchdog, while a stall of rank 0 still shows as rank 0's own silence.
class BeatWhileWaiting {
 public:
  explicit BeatWhileWaiting(const Heartbeat& heartbeat);
  ~BeatWhileWaiting();
  BeatWhileWaiting(const BeatWhileWaiting&) = delete;
  BeatWhileWaiting& operator=(const BeatWhileWaiting&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace xtrain
