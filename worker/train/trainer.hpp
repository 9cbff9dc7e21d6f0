// One rank's training run: data, model, optimizer, the step loop, validation, checkpoints and
// the closing sample. Construction does everything that depends only on this rank's inputs
// (data, model, initial weights, the checkpoint to resume from), so bad input fails there,
// before any peer is waited for; run() then trains in lockstep with the other ranks.
//
// One optimizer step, on every rank:
//   draw the global batch's window starts (the same sampler state everywhere)
//   zero grads; for each of accum = batch_size / (world * micro_batch_size) micro-steps:
//     forward this rank's micro-batch (sequences i with i % world == rank)
//     backward with loss scale 1/accum, adding into the gradient buffer; on the LAST micro-step
//     only, each finished layer's gradient span is handed to the communicator at once, so its
//     average overlaps the rest of backward (no_sync: one all-reduce per parameter per step)
//   download the loss (this rank's compute is done: its busy time ends here); queue one small
//   all-reduce of [loss, stop request, each rank's busy time] behind the gradients' buckets;
//   finish_all_reduces; the global grad norm (identical everywhere, as the averaged grads are)
//   computed where the gradients live, beside the scalars; one download brings both
//   clip, lr, AdamW (nothing waits for them: the next step's loss download does)
//
// Busy time: a rank's step time until its loss is downloaded, which waits for its own forward and
// backward but for none of the collectives (they run beside backward and are waited for later),
// less the time the communication threads took from the training thread meanwhile (BusyClock).
// In synchronous data parallelism every rank's wall time per step is the same; the busy time is
// what shows a straggler (xlaunch watches it in the heartbeat records, metrics.jsonl has every
// rank's as rank_step_ms). Each rank fills its own slot of the small all-reduce with its busy time
// times the world size, so the average hands every rank all of them.
//
// Host waits per step, on any world size: the loss's download and the scalars' download (the
// norm rides with them), so a CUDA rank blocks twice and never after the optimizer.
//
// Validation (train.eval_every): the loss over the same windows at every world size, and with
// train.eval_multiple_choice the multiple-choice accuracy: each rank scores examples r, r + world,
// ... with the training model (forward only, the loss sums taken, so the next step starts as it
// would have) and the counts are summed across ranks.
//
// Progress: the training thread marks each phase and layer in the heartbeat record
// (worker/train/heartbeat.hpp), the communication thread the bucket it reduces.
//
// Where training continues is rank 0's decision: a rank whose checkpoint state differs (on several
// nodes without a shared filesystem only node 0 sees the checkpoints) takes rank 0's step,
// sampler state, weights and moments before the first step.
//
// Stop requests (SIGUSR1, e.g. a scheduler's preemption warning): the flag rides on the per-step
// loss all-reduce, so every rank sees it at the same step even if only one rank got the signal;
// they write a checkpoint at the end of that step and exit 0 with status "preempted" in the
// result file (resume: auto continues from it).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_spec.hpp"
#include "common/model_file.hpp"
#include "worker/train/adamw.hpp"
#include "worker/train/busy_clock.hpp"
#include "worker/model/backend.hpp"
#include "worker/data/batch_sampler.hpp"
#include "worker/data/multiple_choice.hpp"
#include "worker/comm/communicator.hpp"
#include "worker/train/fault_injection.hpp"
#include "worker/model/gpt.hpp"
#include "worker/train/run_report.hpp"
#include "worker/formats/text_codec.hpp"
#include "worker/data/token_source.hpp"

namespace xtrain {

// Training diverged: a step's loss or gradient norm (both the same on every rank) is not finite.
// Thrown before that step's update, so the parameters and the checkpoints stay finite; the worker
// exits 3 (exit_code::kDiverged), failure_kind "diverged".
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // Loads the data and the tokenizer, builds the model and optimizer, and takes the weights from
  // the checkpoint checkpoint.resume continues from, else from model.init_from (weights only:
  // the optimizer starts fresh), else from model.init_seed. Input problems throw SpecError
  // (DataError), FileError or CheckpointError naming the field or file.
  Trainer(const JobSpec& spec, std::string run_dir, int rank, int world_size, Backend& backend,
          RunReport& report, FaultInjection fault = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains to train.steps (or until a stop request), then samples text on rank 0. Returns this
  // rank's result (status, step, losses, parameter digest). Communication failures throw
  // CommunicatorError; a replica mismatch (at the start, or before a checkpoint) throws
  // std::runtime_error.
  RankResult run(Communicator& comm, const std::atomic<bool>& stop_requested);

  long start_step() const { return start_step_; }
  long completed_steps() const { return completed_steps_; }  // optimizer steps done so far
  const GPT& model() const { return *model_; }

 private:
  struct StepOutcome {
    double loss = 0;       // mean over all ranks
    double grad_norm = 0;  // global, before clipping
    bool stop = false;     // some rank was asked to stop
    double busy_ms = 0;    // this rank's
    std::vector<double> rank_busy_ms;  // every rank's, by rank
  };

  void adopt_rank0_start(Communicator& comm);
  // Before the first step: every rank's parameters are rank 0's, bit for bit, else std::runtime_error.
  void verify_replicas(Communicator& comm);
  // Before a checkpoint is written (step `step` done): the same check; replicas that differ throw
  // std::runtime_error on every rank alike, and no checkpoint of them is written.
  void check_replicas_agree(Communicator& comm, long step);
  // The ranks whose parameters differ from rank 0's and the first tensor where each does ("rank 1
  // (first at h.0.mlp.c_proj.weight)"), "" where none does; every rank takes part and learns the
  // same. A CRC-32C of each tensor, one small collective where all agree (two more where not): no
  // copy of the weights is made or sent.
  std::string replicas_apart(Communicator& comm);
  void flip_parameter_bit();  // XTRAIN_FAULT_FLIP: one bit of one parameter, on this rank only
  // Optimizer step `step` (0-based); `stop_here`: this rank was asked to stop.
  StepOutcome train_step(Communicator& comm, BusyClock& busy, long step, bool stop_here);
  // After backward: the loss (busy until it is downloaded), the gradients' and the step scalars'
  // all-reduces, and the gradient norm, with two host waits in all (the loss, then the scalars).
  StepOutcome finish_step(Communicator& comm, bool stop_here, const BusyClock& busy);
  int bucket_id(Span span) const;  // the layer whose gradients `span` holds, n_layer for the embeddings'
  double evaluate(Communicator& comm);
  // train.eval_multiple_choice on this rank's share of the examples, the counts summed over ranks.
  ChoiceAccuracy score_multiple_choice(Communicator& comm);
  double average_scalar(Communicator& comm, double value);
  // Each slot's sum over the ranks of counts (whole numbers below a million, as floats).
  std::vector<std::uint64_t> sum_over_ranks(Communicator& comm, const std::vector<float>& mine);
  void save(Communicator& comm, long step);
  std::string param_digest();
  // Samples sample.tokens after training (rank 0): prints the text and returns it, printable.
  std::optional<std::string> sample();
  // Bits per byte per nat of validation loss: tokens / (ln 2 * bytes) over the validation targets.
  double validation_bits_per_nat() const;
  std::string describe() const;

  const JobSpec& spec_;
  std::string run_dir_;
  int rank_;
  int world_;
  int micro_batch_;   // B: sequences per rank per micro-step
  int accum_;         // micro-steps per optimizer step
  Backend& backend_;
  RunReport& report_;
  FaultInjection fault_;

  DataSplit data_;
  TextCodec text_;                    // bytes, the tokenizer, or no text (token shards without one)
  std::vector<NamedFile> tokenizer_files_;  // rank 0: spec.tokenizer's files, which checkpoints carry
  std::vector<std::int32_t> prompt_;  // sample.prompt, encoded
  std::unique_ptr<BatchSampler> sampler_;
  std::vector<std::uint64_t> val_starts_;
  std::vector<ChoiceExample> choices_;  // this rank's share of train.eval_multiple_choice: r, r + world, ...
  std::uint64_t choices_total_ = 0;     // examples per validation, all ranks together (0: none)
  std::unique_ptr<GPT> model_;
  std::unique_ptr<AdamW> adamw_;
  float* scalars_ = nullptr;          // (2 + world + 2) backend memory: the step's averaged scalars, then
                                      // the gradients' sum of squares (a double's bytes)
  std::vector<std::int32_t> inputs_;  // (B,T) host
  std::vector<std::int32_t> targets_; // (B,T) host
  std::vector<float> host_scalars_;   // (2 + world + 2) host staging of scalars_
  long start_step_ = 0;
  long completed_steps_ = 0;
  long current_step_ = 0;             // 1-based, the step in progress (for progress reports)
  bool in_step_ = false;              // the model's layers are a training step's (not validation's)
  std::string resumed_from_;          // the checkpoint training continued from
  std::optional<long> checkpoint_step_;  // of the newest checkpoint resumed from or written, if any
  double resume_seconds_ = 0.0;       // finding, verifying and loading it
  std::string initialised_from_;      // the model file the weights came from (model.init_from)
  double bits_per_nat_ = 0;           // val bits per byte = val loss (nats per token) * this; 0 = unknown
};

}  // namespace xtrain
