// The next token from a model's logits: greedy, or drawn with a temperature, top-k and top-p
// (nucleus) filtering, from the training data's seeded generator (xoshiro256**,
// worker/data/batch_sampler.hpp), so that the same seed gives the same tokens with any compiler
// and standard library.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "worker/data/batch_sampler.hpp"

namespace xtrain {

struct SamplingOptions {
  double temperature = 1.0;  // 0: always the most likely token (greedy); else > 0
  int top_k = 0;             // keep the k most likely tokens; 0: all of them
  double top_p = 1.0;        // keep the fewest most likely tokens whose probability reaches p, (0, 1]
};

class TokenSampler {
 public:
  // std::invalid_argument naming the option when one is out of its range.
  TokenSampler(const SamplingOptions& options, std::uint64_t seed);

  // `logits`: one per token of the vocabulary. Ties go to the lower id.
  std::int32_t next(std::span<const float> logits);

  // A uniform double in [0, 1) from the generator's next 53 bits.
  double uniform();

 private:
  SamplingOptions options_;
  Xoshiro256 rng_;
  std::vector<std::pair<float, std::int32_t>> candidates_;  // (logit, id)
};

// The seed of sample `index` (from 0) of a command's `seed`: the seed itself for the first, so
// that one sample's text does not depend on how many were asked; for each further one the seed
// mixed with a splitmix64 output of its index, its own stream whether the samples run one after
// another or side by side. (Sample 2 of seed S is not sample 1 of seed S + 1.)
std::uint64_t sample_seed(std::uint64_t seed, int index);

}  // namespace xtrain
