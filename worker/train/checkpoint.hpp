// Checkpoints: RUN_DIR/checkpoints/step-NNNNNNNN/ (8 or more digits), each holding
//   model.safetensors      the weights with Hugging Face GPT-2 names and layouts (GPT2Model's state
//                          dict: wte.weight (V, C) with the V real rows, Conv1D weights (in, out),
//                          no attn.bias mask buffers), loadable by transformers together with
//   config.json            a GPT2Config for it (from_pretrained on the directory works);
//   optimizer.safetensors  AdamW's m and v over the whole padded flat layout, the padding rows of
//                          wte (which model.safetensors has no room for), the AdamW step count in
//                          the metadata;
//   state.json             format version, step, the sampler state, the model spec, the train
//                          settings and the training-token count, checked again on resume; each
//                          other file's size and CRC-32C ("files"), verified before a resume;
//                          and (format 2) "crc32c": the CRC-32C of its own content, the compact
//                          serialisation of the object without that key, so a flipped bit that
//                          leaves valid JSON (a step, a sampler word) is caught too;
//   vocab.json, merges.txt the run's tokenizer, where it has one: GPT-2's vocabulary files (which
//   or gpt2_tokenizer.bin  transformers loads beside the model) or llm.c's tokenizer file, so that
//                          resume, generate, eval and export need nothing outside the directory
//                          (the run or the vocabulary may have moved since); checksummed as well.
// Together exactly what is needed to continue bit for bit. Rank 0 writes one under
// step-NNNNNNNN.tmp-PID, fsyncs every file and the directory, renames it, fsyncs the parent: a
// directory with a final name is always complete, and a crashed writer leaves only a .tmp-* that
// the next save removes.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/checkpoint_dirs.hpp"
#include "common/job_spec.hpp"
#include "common/model_file.hpp"
#include "worker/data/batch_sampler.hpp"
#include "worker/model/host_access.hpp"
#include "worker/model/param_layout.hpp"

namespace xtrain {

inline constexpr int kCheckpointFormatVersion = 2;  // 2: state.json checksums itself; 1 is still read

// A checkpoint that cannot be used: what() is "checkpoint DIR: MESSAGE", one line, e.g.
//   checkpoint runs/x/checkpoints/step-00000010: model.n_embd is 64 but the spec says 128
class CheckpointError : public std::runtime_error {
 public:
  CheckpointError(std::string dir, const std::string& message)
      : std::runtime_error("checkpoint " + dir + ": " + message), dir_(std::move(dir)) {}
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// A checkpoint whose files do not hold (a checksum, a size, a header, state.json's format), as
// against one that does not fit the spec: what resume "auto" skips for the one before.
class CheckpointDamage : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

// Everything besides the parameter and moment buffers that a resumed run needs.
struct TrainState {
  std::int64_t step = 0;           // optimizer steps completed
  std::int64_t adam_t = 0;         // AdamW's step count (bias correction)
  SamplerState sampler;            // the training sampler after `step` steps
  std::uint64_t train_tokens = 0;  // tokens in the training split the sampler draws from
};

// Writes the checkpoint of `state.step` under run_dir/checkpoints/ (params, m, v: layout.total()
// floats each in `memory`; `tokenizer`: read_tokenizer_files of the run's, read once when it starts,
// since the path may be a checkpoint this removes, or none), then keeps only the
// spec.checkpoint.keep newest complete checkpoints and removes stale .tmp-* directories. Returns
// the checkpoint's directory. Throws FileError (disk full, permissions) after removing its
// temporary directory.
std::string save_checkpoint(const std::string& run_dir, const JobSpec& spec, const ParamLayout& layout,
                            const float* params, const float* m, const float* v, const TrainState& state,
                            const std::vector<NamedFile>& tokenizer, const HostAccess& memory = {});

// The bytes of a checkpoint's tensor files for a model of `dims`, which save_checkpoint writes: the
// fp32 weights (4 bytes a parameter) and AdamW's m and v (8), padding included; the headers and the
// small files (config, state, tokenizer) add some KiB, or a few MiB with GPT-2's tokenizer.
std::uint64_t checkpoint_tensor_bytes(const ModelDims& dims);

// Which checkpoint to resume from: `resume` is "never" (none), "auto" (the newest complete
// checkpoint under run_dir/checkpoints/ whose files are intact, or none; a damaged one is skipped
// with one warning naming it and the file) or the path of a checkpoint directory (which must be
// intact, else CheckpointError). Intact: state.json's own CRC-32C matches its content, its step
// matches the directory's name (step-NNNNNNNN), the headers agree with the sizes, and every other
// file has the size and CRC-32C that state.json recorded (so this reads the checkpoint's files once:
// xlaunch's check before any rank starts; a rank resumes with resume_from_checkpoint).
std::optional<std::string> find_resume_checkpoint(const std::string& run_dir, const std::string& resume);

// The step checkpoint `dir`'s state.json records (its directory may be a copy under any name).
// Throws CheckpointError.
std::int64_t recorded_step(const std::string& dir);

// checkpoint.resume for an attempt of a job (restart_count 0 for the first): a restarted attempt
// goes on from the checkpoints the job itself wrote, the run dir's at later steps than `resume`
// starts from ("never": any; xlaunch moved the others aside before the first attempt), as under
// "auto"; where there are none, and for the first attempt, `resume` as given.
std::string resume_for_attempt(const std::string& run_dir, const std::string& resume, int restart_count);

// The checkpoint resume_from_checkpoint tries first, with only what it checks before loading:
// state.json, the headers and the small files (the tensor files are not read). For what a rank
// must know of it before the trainer loads it (the model's shape and carried tokenizer under
// model.init_from): it is the one loaded unless a tensor file is damaged, and then the one loaded
// is an earlier checkpoint of the same run, of the same shape and tokenizer.
std::optional<std::string> find_resume_candidate(const std::string& run_dir, const std::string& resume);

// The checkpoint a run directory stands for where its model is used (generate, eval, export):
// the newest complete one whose state.json, model.safetensors and other small files are intact as
// find_resume_checkpoint checks them, a damaged one skipped with a warning; its
// optimizer.safetensors, two thirds of its bytes, is not read. nullopt: none.
std::optional<std::string> find_model_checkpoint(const std::string& run_dir);

// The files of checkpoint `dir` besides its tensor files (state.json, config.json, the tokenizer's)
// against their recorded sizes and CRC-32Cs: what a checkpoint used as a model (init_from,
// generate, eval, export) is read for besides the weights, whose own digest the safetensors reader
// checks. Throws CheckpointError naming the file.
void verify_checkpoint_small_files(const std::string& dir);

// resolve_model_source (common/model_file.hpp) as training uses it, in the launcher's plan and in
// each rank: one of our checkpoints as model.init_from, with nothing resumed, also has its files
// besides the tensors verified (verify_checkpoint_small_files) before its tokenizer is read, a
// damaged one a SpecError naming model.init_from. (A checkpoint resumed from was verified whole by
// find_resume_checkpoint.) On resume, a spec.tokenizer that no longer exists is replaced by the
// copy of the run's tokenizer that the checkpoint carries, with a warning: the path may have
// moved, or (a restarted attempt) be the checkpoint the attempt before resumed from, since removed
// by checkpoint.keep.
void resolve_training_model(JobSpec& spec, const nlohmann::json& doc, const std::optional<std::string>& resume_from);

// Whether resolve_training_model can change `spec`, so that a rank looks for (and verifies) its
// resume checkpoint an extra time only then: model.init_from is set, or spec.tokenizer is gone.
bool needs_training_model_resolution(const JobSpec& spec);

// What may change on resume, for each train.* key (docs/job-spec.md has the table):
//   kKept       batch_size and seed, which with the checkpoint's sampler state fix every later step's
//               batch: a change is refused, naming the key and both values;
//   kSchedule   steps, lr, min_lr, warmup_steps: the rate moves at once (or from the first step
//               whose rate differs), said in one log line for all of them with both rates;
//   kOptimizer  weight_decay, beta1, beta2, eps, grad_clip: AdamW takes them from the resumed step
//               on, its moments carried over;
//   kComputing  micro_batch_size, eval_every, eval_batches, eval_multiple_choice,
//               eval_multiple_choice_examples, log_every, precision, cuda_graph, deterministic: how
//               the same steps are computed, checked or logged.
// nullopt for a key it does not know, which is then kept; a test keeps the table complete.
enum class ResumeRule { kKept, kSchedule, kOptimizer, kComputing };
std::optional<ResumeRule> train_key_on_resume(const std::string& key);

// What the launcher checks before starting anything, on the checkpoint find_resume_checkpoint
// chose: its model settings and kept train keys match the spec, and it was trained on
// `train_tokens` training tokens (the split the data gives now). Reads state.json only. Returns the
// lines rank 0 will say of the train keys that changed (`resume: train.lr changed from ...`), for
// --check and --dry-run. Throws CheckpointError.
std::vector<std::string> check_checkpoint_fits(const std::string& dir, const JobSpec& spec,
                                               std::uint64_t train_tokens);

// Loads checkpoint `dir` into params, m, v (layout.total() floats each in `memory`) after checking it against
// the spec (model shape, the kept train keys; each allowed change is logged in one line), against
// `train_tokens` (the size of the current training split), and its tensor files for damage: their
// data's own checksums and, as they load, the sizes and CRC-32Cs state.json records. Throws
// CheckpointError naming the checkpoint, the file and the mismatch (CheckpointDamage for damage);
// the buffers are untouched unless everything loaded.
TrainState load_checkpoint(const std::string& dir, const JobSpec& spec, const ParamLayout& layout,
                           std::uint64_t train_tokens, float* params, float* m, float* v,
                           const HostAccess& memory = {});

// find_resume_checkpoint, then load_checkpoint of the one it finds, with every file read once: each
// candidate's state.json and other small files are verified first, its tensor files as they
// load. Under "auto" a damaged one is skipped with find_resume_checkpoint's warning, the buffers
// untouched, and the one before tried. nullopt: nothing to resume (the buffers untouched).
struct ResumedCheckpoint {
  std::string dir;
  TrainState state;
};
std::optional<ResumedCheckpoint> resume_from_checkpoint(const std::string& run_dir, const JobSpec& spec,
                                                        const ParamLayout& layout, std::uint64_t train_tokens,
                                                        float* params, float* m, float* v,
                                                        const HostAccess& memory = {});

}  // namespace xtrain
