// Reading a run directory from outside its supervisor, live or finished: what `xlaunch ls`,
// `xlaunch report` (and the supervisor's live report) show. Nothing here writes. Files that are
// missing or malformed read as null: a run dir from a killed or older xlaunch is still listed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xtrain::launcher {

// A run's state as one word: finished (summary.json), or alive (the supervisor holds the run
// dir's lock), or lost (neither: the supervisor was killed and left no summary).
enum class RunState { kRunning, kCompleted, kPreempted, kFailed, kStopped, kLost };

struct RunInfo {
  std::string dir;
  std::string name;               // job.json's name, else the directory's
  nlohmann::json job;             // job.json, or null
  nlohmann::json state;           // state.json, or null
  nlohmann::json summary;         // summary.json, or null
  bool summary_unreadable = false;  // summary.json is there but not JSON (a damaged disk): the run shows as lost
  RunState run_state = RunState::kLost;
  std::string phase;              // alive: state.json's status (starting, running, restarting, stopping)
  std::optional<int> exit_code;   // finished
  std::optional<double> started;  // seconds since the epoch
  std::optional<double> duration_s;
  // xtrain-worker's runs only (job.json's worker is ours): train.steps, and tokens per optimizer
  // step (train.batch_size x model.seq_len).
  std::optional<long> total_steps;
  std::optional<double> tokens_per_step;
};

// nullopt when `dir` is not a run directory (launcher/run/run_dir.hpp's why_not_a_run_dir).
std::optional<RunInfo> read_run_info(const std::string& dir);

// "running", "completed", "failed (3)", "stopped (143)", "lost" (or "lost (summary.json unreadable)");
// alive but not running: the phase.
std::string state_label(const RunInfo& run);

// metrics.jsonl records. A value the record lacks is NaN.
struct StepRecord {
  long step = 0;
  double loss, lr, grad_norm, tokens_per_s, ms_per_step, elapsed_s;
  double tokens;                     // the record's "tokens", else NaN (see tokens_per_step)
  std::vector<double> rank_step_ms;  // one per rank, when recorded
};
struct ValRecord {
  long step = 0;
  double val_loss;
  double mc_accuracy;  // train.eval_multiple_choice's accuracy
};

// metrics.jsonl read incrementally: update() parses only what was appended since the last call
// (the live report reads it every 10 s). A step logged twice (a resumed run repeats the steps
// after its checkpoint) keeps its last record; train and validation records are kept apart.
class MetricsLog {
 public:
  explicit MetricsLog(std::string path);
  bool update();  // true when records were added; a file that shrank is read again from the start

  const std::map<long, StepRecord>& steps() const { return steps_; }
  const std::map<long, ValRecord>& validations() const { return validations_; }
  std::int64_t records() const { return records_; }        // lines parsed, repeats included
  std::int64_t superseded() const { return superseded_; }  // records replaced by a later one
  std::int64_t malformed() const { return malformed_; }    // lines that are not a step record

 private:
  void parse_line(const std::string& line);

  std::string path_;
  std::int64_t offset_ = 0;
  std::string partial_;  // a line whose '\n' has not been written yet
  std::map<long, StepRecord> steps_;
  std::map<long, ValRecord> validations_;
  std::int64_t records_ = 0;
  std::int64_t superseded_ = 0;
  std::int64_t malformed_ = 0;
};

// The last training record of a metrics file, from its tail only (ls lists many runs).
std::optional<StepRecord> last_step_record(const std::string& path);

// 0.04 s, 12.3 s, 3m 12s, 2h 05m.
std::string duration_text(double seconds);
// Local time, "2026-12-01 02:45:12".
std::string format_local_time(double epoch_seconds);
// "2026-11-30T10:41:12.345Z" (iso_time's form) -> seconds since the epoch.
std::optional<double> parse_iso_time(const std::string& text);

}  // namespace xtrain::launcher
