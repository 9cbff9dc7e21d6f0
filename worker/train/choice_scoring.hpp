// Multiple-choice accuracy as llm.c computes it (worker/data/multiple_choice.hpp has the file):
// each completion runs after its context as one row, and its score is the mean cross-entropy of
// its own tokens, each predicted from the context and the completion's tokens before it; the
// lowest mean is the model's answer. `xtrain-worker eval --multiple-choice` and the Trainer's
// validation (train.eval_multiple_choice) both score with score_choices, on any backend.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/job_spec.hpp"
#include "worker/data/multiple_choice.hpp"
#include "worker/model/gpt.hpp"

namespace xtrain {

// The positions the longest of an example's rows takes: |context| + |completion| - 1 (the last
// token is only a target).
int choice_positions(const ChoiceExample& x);

struct ChoiceScore {
  std::uint64_t examples = 0;
  std::uint64_t correct = 0;
  std::vector<int> predictions;  // (examples) the completion each example's lowest mean loss picked
};

// Scores `examples` with `gpt`'s forward with targets: every example's completions one row each,
// padded to the model's T (its dims().T), max_batch() rows per forward (across examples), with
// `progress` called after each forward with the rows scored so far and all rows (a heartbeat, a
// progress line). std::invalid_argument when an example's rows
// do not fit T. Leaves the model's loss sums empty, as take_loss does.
ChoiceScore score_choices(GPT& gpt, std::span<const ChoiceExample> examples,
                          const std::function<void(std::uint64_t done, std::uint64_t total)>& progress = {});

// train.eval_multiple_choice, read and checked for this spec's model: every token below
// model.vocab_size and every example within model.seq_len positions. Keeps the first
// train.eval_multiple_choice_examples examples (0: all). Throws DataError naming the key.
std::vector<ChoiceExample> read_spec_choices(const TrainSpec& train, const ModelSpec& model);

}  // namespace xtrain
