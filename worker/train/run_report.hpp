// What a rank tells the people and programs watching it:
//   - rank 0: a progress line every log_every steps, validation and checkpoint lines, and the same
//     numbers appended to <run dir>/metrics.jsonl (one JSON object per line; a resumed run first
//     drops the records of the steps it is about to repeat, so each step appears once);
//   - every rank: heartbeats (the mtime of $XTRAIN_HEARTBEAT_FILE) so xlaunch's watchdog can tell
//     a slow rank from a hung one, the progress record in the same file (worker/train/heartbeat.hpp), and
//     at exit $XTRAIN_RESULT_FILE, written atomically.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/number_format.hpp"
#include "worker/train/heartbeat.hpp"

namespace xtrain {

// Multiple-choice answers at one validation (train.eval_multiple_choice), all ranks together.
struct ChoiceAccuracy {
  std::uint64_t correct = 0;
  std::uint64_t examples = 0;
  double accuracy() const { return static_cast<double>(correct) / static_cast<double>(examples); }
};

// The result a rank leaves in $XTRAIN_RESULT_FILE (and that xlaunch merges into summary.json).
struct RankResult {
  int rank = 0;
  std::string status;        // "completed", "preempted" (checkpointed after SIGUSR1) or "failed"
  long step = 0;             // optimizer steps done
  std::optional<double> loss;
  std::optional<double> val_loss;  // with val_ppl = exp(val_loss) in the file
  std::optional<double> val_bpb;   // bits per byte, where the data allows it
  std::optional<ChoiceAccuracy> mc;  // the last validation's multiple-choice answers
  std::string param_digest;  // FNV-1a 64 of the parameter bytes, 16 hex digits
  std::string error;         // when failed: the one-line reason
  // When failed: "primary" (this rank's own failure), "peer_lost" (a collective failed because a
  // peer died or stopped answering: the echo of a failure elsewhere, never the root cause) or
  // "diverged" (the step's loss or gradient norm was not finite: every rank alike, and no restart).
  std::string failure_kind;
  nlohmann::json extra = nlohmann::json::object();  // more fields (world size, backends, timing)
};

class RunReport {
 public:
  // `run_dir` may be empty (no metrics file). Only rank 0 prints progress and writes metrics.
  RunReport(int rank, std::string run_dir, const std::string& heartbeat_file, std::string result_file);

  // The heartbeat file: beat() at least once per step and between long startup phases (failures
  // are ignored: a missing heartbeat is the watchdog's business); phases as they change.
  Heartbeat& heartbeat() { return heartbeat_; }

  // Starts the step clock for throughput and ETA (after setup, before the first step to time).
  // Rank 0 drops the records of steps after `first_step` from metrics.jsonl: a resumed run is
  // about to log them again.
  void start_training(long first_step, long total_steps, long tokens_per_step, int log_every);
  // Updates the progress record; prints and records the step when it falls on log_every (or is
  // the first or the last one).
  void step(const StepStats& s);
  // The validation loss, with its perplexity, when known (bits_per_byte > 0) bits per byte, and
  // the multiple-choice accuracy when the spec names a file.
  void validation(long step, double val_loss, std::optional<double> bits_per_byte,
                  std::optional<ChoiceAccuracy> choices, double seconds);
  // The checkpoint directory `path`, written in `seconds`: its size and the rate, in one line.
  void checkpoint(long step, const std::string& path, double seconds);

  void write_result(const RankResult& result) const;

  double tokens_per_second() const;  // over the steps timed so far
  double training_seconds() const;

 private:
  void append_metrics(const nlohmann::json& record) const;

  int rank_;
  std::string run_dir_;
  Heartbeat heartbeat_;
  std::string result_file_;
  long first_step_ = 0;
  long total_steps_ = 0;
  long tokens_per_step_ = 0;
  int log_every_ = 1;
  std::chrono::steady_clock::time_point started_;
  long steps_timed_ = 0;
  double interval_ms_ = 0;   // step time summed since the last printed line
  std::vector<double> interval_busy_ms_;  // each rank's busy time summed since the last printed line
  long interval_steps_ = 0;
  double recent_ms_ = 0;     // moving average of the step time, for the progress record
};

// Cuts the metrics file at `path` before the records of steps after `step` (and a torn last line):
// its tail, since records are appended in step order; leaves it untouched when there is nothing to
// drop.
void drop_metrics_after(const std::string& path, long step);

// FNV-1a 64-bit over raw bytes, as 16 lowercase hex digits: cheap, and any differing bit changes it.
// Fed in any number of pieces, it is the digest of their concatenation.
class Fnv1a {
 public:
  void add(const void* data, size_t bytes);
  std::string hex() const;

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};
std::string fnv1a_hex(const void* data, size_t bytes);  // of one piece

}  // namespace xtrain
