#include "worker/train/choice_scoring.hpp"

#include <algorithm>
#include <stdexcept>

#include "worker/data/token_source.hpp"

namespace xtrain {

int choice_positions(const ChoiceExample& x) {
  size_t longest = 0;
  for (const auto& c : x.completions) longest = std::max(longest, c.size());
  return static_cast<int>(x.context.size() + longest) - 1;
}

ChoiceScore score_choices(GPT& gpt, std::span<const ChoiceExample> examples) {
  const int T = gpt.dims().T;
  const int B = gpt.max_batch();
  std::vector<std::int32_t> tokens(static_cast<size_t>(B) * T), targets(tokens.size());  // (B,T)
  std::vector<float> losses(tokens.size());                                               // (B,T)
  ChoiceScore score;
  for (size_t e = 0; e < examples.size(); ++e) {
    const ChoiceExample& x = examples[e];
    if (choice_positions(x) > T) {
      throw std::invalid_argument("score_choices: example " + std::to_string(x.index) + " needs " +
                                  std::to_string(choice_positions(x)) + " positions, the model has " + std::to_string(T));
    }
    const int n = static_cast<int>(x.completions.size());
    int best = 0;
    double best_loss = 0.0;
    // The completions in groups of up to B rows; a row's losses do not depend on its neighbours.
    for (int first_row = 0; first_row < n; first_row += B) {
      const int rows = std::min(B, n - first_row);
      std::fill(tokens.begin(), tokens.end(), 0);
      std::fill(targets.begin(), targets.end(), 0);
      for (int r = 0; r < rows; ++r) {
        const auto& completion = x.completions[static_cast<size_t>(first_row + r)];
        std::vector<std::int32_t> row = x.context;
        row.insert(row.end(), completion.begin(), completion.end());
        std::copy(row.begin(), row.end() - 1, tokens.begin() + static_cast<long>(r) * T);
        std::copy(row.begin() + 1, row.end(), targets.begin() + static_cast<long>(r) * T);
      }
      gpt.forward(tokens.data(), targets.data(), rows);
      // The sums hold only this forward's losses: the ones before were taken (here or by the caller).
      gpt.backend().download(losses.data(), gpt.losses(), static_cast<size_t>(rows) * T);
      gpt.take_loss();
      for (int r = 0; r < rows; ++r) {
        const int c = first_row + r;
        // The completion's tokens are targets [|context| - 1, |context| + |completion| - 1).
        const size_t from = x.context.size() - 1, count = x.completions[static_cast<size_t>(c)].size();
        double sum = 0.0;
        for (size_t t = from; t < from + count; ++t) sum += losses[static_cast<size_t>(r) * T + t];
        const double mean = sum / static_cast<double>(count);
        if (c == 0 || mean < best_loss) best = c, best_loss = mean;
      }
    }
    score.correct += best == x.label;
    score.predictions.push_back(best);
  }
  score.examples = examples.size();
  return score;
}

std::vector<ChoiceExample> read_spec_choices(const TrainSpec& train, const ModelSpec& model) {
  const std::string field = "train.eval_multiple_choice";
  std::vector<ChoiceExample> examples = read_multiple_choice(train.eval_multiple_choice, model.vocab_size, field);
  if (train.eval_multiple_choice_examples > 0 &&
      examples.size() > static_cast<size_t>(train.eval_multiple_choice_examples)) {
    examples.resize(static_cast<size_t>(train.eval_multiple_choice_examples));
  }
  for (size_t e = 0; e < examples.size(); ++e) {
    const int positions = choice_positions(examples[e]);
    if (positions > model.seq_len) {
      throw DataError(field, train.eval_multiple_choice + ": example " + std::to_string(e) + " needs " +
                                 std::to_string(positions) + " positions (context and its longest completion), more "
                                 "than model.seq_len " + std::to_string(model.seq_len));
    }
  }
  return examples;
}

}  // namespace xtrain
