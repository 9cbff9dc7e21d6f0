// Where a run's checkpoints live and which of them are complete: RUN_DIR/checkpoints/step-NNNNNNNN/
// (8 or more digits) is a complete checkpoint; step-NNNNNNNN.tmp-* is one being written, or left
// by an interrupted writer. The worker writes and loads them (worker/train/checkpoint.hpp); xlaunch
// only looks, to learn which checkpoint a run would resume from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace xtrain {

inline constexpr const char* kCheckpointTmpMarker = ".tmp-";
inline constexpr const char* kCheckpointFormat = "xtrain-checkpoint";  // state.json's "format"
// The files of a checkpoint; the first two are also a Hugging Face GPT-2 directory's.
inline constexpr const char* kModelWeightsFile = "model.safetensors";
inline constexpr const char* kModelConfigFile = "config.json";
inline constexpr const char* kCheckpointStateFile = "state.json";
inline constexpr const char* kCheckpointOptimizerFile = "optimizer.safetensors";

std::string checkpoint_dir_name(std::int64_t step);  // "step-00000042"

// The step a complete checkpoint's directory name encodes; nullopt for anything else.
std::optional<std::int64_t> checkpoint_step(const std::string& name);

// A step-* directory name with a .tmp-* suffix: partial, never resumed from.
bool is_partial_checkpoint(const std::string& name);

// The complete checkpoint directories under `root` (RUN_DIR/checkpoints), newest first; none
// when root does not exist.
std::vector<std::pair<std::int64_t, std::filesystem::path>> complete_checkpoints(const std::filesystem::path& root);

// Whether `dir` is where a run keeps its checkpoints: it has checkpoints/ or summary.json (a run that
// ended before its first checkpoint). xlaunch's own views of a run need more (launcher/run/run_dir.hpp).
bool holds_a_run(const std::filesystem::path& dir);

// For an error about `dir` given where one checkpoint (or model) was expected: when it holds_a_run
// or is a run's checkpoints/ itself, what it is and
// its newest complete checkpoint by name: "a run directory, whose newest checkpoint is
// R/checkpoints/step-00000400"; nullopt for anything else.
std::optional<std::string> describe_checkpoint_holder(const std::filesystem::path& dir);

// The bytes of the files in checkpoint directory `dir` (0 for what cannot be read), for the logs.
std::uint64_t checkpoint_bytes(const std::filesystem::path& dir);

}  // namespace xtrain
