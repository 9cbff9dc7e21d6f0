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

ChoiceScore score_choices(GPT& gpt, std::span<const ChoiceExample> examples,
                          const std::function<void(std::uint64_t done, std::uint64_t total)>& progress) {
  const int T = gpt.dims().T;
  const int B = gpt.max_batch();
  struct Row {
    size_t example;
    size_t completion;
  };
  std::vector<Row> rows;  // every example's completions, in order
  for (size_t e = 0; e < examples.size(); ++e) {
    const ChoiceExample& x = examples[e];
    if (choice_positions(x) > T) {
      throw std::invalid_argument("score_choices: example " + std::to_string(x.index) + " needs " +
                                  std::to_string(choice_positions(x)) + " positions, the model has " + std::to_string(T));
    }
    for (size_t c = 0; c < x.completions.size(); ++c) rows.push_back({e, c});
  }
  std::vector<double> means(rows.size());                                                 // (rows)
  std::vector<std::int32_t> tokens(static_cast<size_t>(B) * T), targets(tokens.size());  // (B,T)
  std::vector<float> losses(tokens.size());                                               // (B,T)
  // B rows per forward, whatever example they belong to: a row's losses depend on its own tokens
  // only (up to the last bits of the products, whose blocking may follow the batch).
  for (size_t first = 0; first < rows.size(); first += static_cast<size_t>(B)) {
    const int n = static_cast<int>(std::min(rows.size() - first, static_cast<size_t>(B)));
    std::fill(tokens.begin(), tokens.end(), 0);
    std::fill(targets.begin(), targets.end(), 0);
    for (int r = 0; r < n; ++r) {
      const Row& at = rows[first + static_cast<size_t>(r)];
      const ChoiceExample& x = examples[at.example];
      const auto& completion = x.completions[at.completion];
      std::vector<std::int32_t> row = x.context;
      row.insert(row.end(), completion.begin(), completion.end());
      std::copy(row.begin(), row.end() - 1, tokens.begin() + static_cast<long>(r) * T);
      std::copy(row.begin() + 1, row.end(), targets.begin() + static_cast<long>(r) * T);
    }
    gpt.forward(tokens.data(), targets.data(), n);
    // The sums hold only this forward's losses: the ones before were taken (here or by the caller).
    gpt.backend().download(losses.data(), gpt.losses(), static_cast<size_t>(n) * T);
    gpt.take_loss();
    for (int r = 0; r < n; ++r) {
      const Row& at = rows[first + static_cast<size_t>(r)];
      const ChoiceExample& x = examples[at.example];
      // The completion's tokens are targets [|context| - 1, |context| + |completion| - 1).
      const size_t from = x.context.size() - 1, count = x.completions[at.completion].size();
      double sum = 0.0;
      for (size_t t = from; t < from + count; ++t) sum += losses[static_cast<size_t>(r) * T + t];
      means[first + static_cast<size_t>(r)] = sum / static_cast<double>(count);
    }
    if (progress) progress(first + static_cast<size_t>(n), rows.size());
  }
  ChoiceScore score;
  score.examples = examples.size();
  for (size_t i = 0; i < rows.size();) {
    const ChoiceExample& x = examples[rows[i].example];
    int best = 0;  // the first of equal means wins
    for (size_t c = 1; c < x.completions.size(); ++c) {
      if (means[i + c] < means[i + static_cast<size_t>(best)]) best = static_cast<int>(c);
    }
    score.correct += best == x.label;
    score.predictions.push_back(best);
    i += x.completions.size();
  }
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
