// The job spec: one typed struct for everything xlaunch and xtrain-worker read from job.json.
// Parsing, validation and serialisation are driven by one field list per section (job_spec.cpp),
// so a key is named exactly once in the code.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/precision.hpp"

namespace xtrain {

// A spec error names the field by JSON path and says what was expected:
//   launcher.term_timeout_s: expected a number >= 0, got "ten"
class SpecError : public std::runtime_error {
 public:
  SpecError(std::string path, const std::string& message)
      : std::runtime_error(path.empty() ? message : path + ": " + message), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct WorkerSpec {
  std::vector<std::string> command;            // argv; empty = xtrain-worker beside xlaunch
  std::map<std::string, std::string> env;      // added to every rank's environment
};

struct LauncherSpec {
  int max_restarts = 0;
  double term_timeout_s = 10.0;     // SIGTERM -> SIGKILL grace period
  double preempt_grace_s = 0;       // > 0: xlaunch's SIGTERM asks the ranks to checkpoint first, 0 = stop at once
  double heartbeat_timeout_s = 0;   // 0 = no heartbeat watchdog
  double timeout_s = 0;             // whole-job wall-clock limit, 0 = none
  std::string tee = "all";          // all | rank0 | none
  int master_port = 0;              // 0 = pick a free port per attempt
};

struct NodesSpec {
  int nnodes = 1;
  int node_rank = 0;
  std::string rdzv_endpoint;        // host:port of node 0's rendezvous store
  double rdzv_timeout_s = 300.0;
  double keepalive_interval_s = 1.0;  // each node -> node 0's store (common/store/kv_lease.hpp)
  double keepalive_timeout_s = 3.0;   // silence after which a node, or node 0, is lost
};

struct ModelSpec {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 128;
  int seq_len = 64;
  int vocab_size = 256;             // padded internally to a multiple of 128
  std::int64_t init_seed = 1337;
  std::string init_from;            // weights to start from (common/model_file.hpp); empty = init_seed
};

struct DataSpec {
  std::string train;                // text file, llm.c token shard, or glob of shards
  std::string val;                  // same forms; empty = hold out the tail of train
  double val_fraction = 0.05;       // share of train held out when val is empty
};

// A data path with any of these characters is a glob, listed in sorted order, rather than one file.
inline constexpr const char* kGlobCharacters = "*?[";
inline bool is_glob_pattern(const std::string& path) {
  return path.find_first_of(kGlobCharacters) != std::string::npos;
}
// What glob(3) is given for a data path: the longest part of it that names an existing file or
// directory as written is escaped, so "runs [v2]/f[1].txt" is that file when it exists, and
// "data [v2]/*.bin" lists the directory "data [v2]"; the rest stays a pattern.
std::string glob_pattern_of(const std::string& path);

struct TrainSpec {
  int steps = 100;
  int batch_size = 8;               // sequences per optimizer step, all ranks together
  int micro_batch_size = 4;         // sequences per rank per micro-step
  double lr = 3e-4;
  double min_lr = 3e-5;
  int warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double grad_clip = 1.0;           // global gradient norm limit, 0 = off
  std::int64_t seed = 42;           // sampler seed
  int eval_every = 0;               // 0 = no validation
  int eval_batches = 4;             // batches of batch_size sequences per validation
  std::string eval_multiple_choice; // llm.c multiple-choice eval file scored at each validation; empty = none
  int eval_multiple_choice_examples = 0;  // its first N examples per validation, 0 = all
  int log_every = 1;
  std::string precision = "auto";   // auto (bf16 on CUDA, fp32 on CPU) | bf16 | tf32 | fp32
  std::string cuda_graph = "auto";  // auto | on | off: replay recorded layers (worker/model/cuda_graphs.hpp)
  bool deterministic = true;        // false: the bf16 CUDA attention backward sums dQ by atomics (faster)
};

struct SampleSpec {
  int tokens = 0;                   // bytes sampled after training (byte-level data), 0 = none
  double temperature = 0.8;
  int top_k = 40;
  std::string prompt = "\n";
};

struct CheckpointSpec {
  int every = 0;                    // steps between checkpoints, 0 = only after the last step
  int keep = 2;                     // newest complete checkpoints kept
  std::string resume = "auto";      // auto | never | path of a checkpoint directory
};

struct JobSpec {
  std::string name;                          // default: the spec file's base name
  std::string run_dir;                       // default: runs/<name>
  std::optional<int> nproc_per_node;         // nullopt = "auto": the visible GPUs
  int cpu_ranks = 1;                         // ranks when "auto" finds no GPU (or device is cpu)
  std::string device = "auto";               // auto | cuda | cpu
  std::string backend = "auto";              // auto | nccl | gloo
  std::string tokenizer;                     // GPT-2 vocabulary files (a directory or one of its files)
  WorkerSpec worker;
  LauncherSpec launcher;
  NodesSpec nodes;
  ModelSpec model;
  DataSpec data;
  TrainSpec train;
  SampleSpec sample;
  CheckpointSpec checkpoint;
};

// Parses a whole spec. Unknown keys, wrong types and out-of-range values throw SpecError.
// `default_name` fills `name` when the spec has none (the spec file's base name).
JobSpec parse_job_spec(const nlohmann::json& doc, const std::string& default_name = "job");

// Reads and parses a spec file; malformed JSON throws SpecError naming the file, line and column.
nlohmann::json read_job_json(const std::string& path);

// Applies `--set a.b.c=VALUE`: VALUE is JSON, or a plain string when it does not parse as JSON.
void apply_override(nlohmann::json& doc, const std::string& assignment);

// The spec with every default filled in, as written to the run directory's job.json.
nlohmann::json to_json(const JobSpec& spec);

// Other trainers' names for our keys (nanoGPT, llm.c, Hugging Face's Trainer and config.json), each
// with the dotted path of ours ("learning_rate": "train.lr"), as unknown-key errors suggest them;
// "" for a name whose key the spec no longer has (a test keeps there being none).
const std::map<std::string, std::string>& other_trainer_key_names();

// Checks that only make sense for our own worker and a known world size: batch divisibility,
// head size, data paths present. Throws SpecError naming the field.
void validate_for_training(const JobSpec& spec, int world_size);

// train.precision for `device` ("cuda" or "cpu"): "auto" is bf16 on CUDA and fp32 on CPU; tf32
// on CPU throws SpecError naming train.precision.
Precision resolve_precision(const TrainSpec& train, const std::string& device);

}  // namespace xtrain
