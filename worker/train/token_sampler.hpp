// The next token from a model's logits: greedy, or drawn with a temperature, top-k and top-p
// (nucleus) filtering, from the training data's seeded generator (xoshiro256**,
// worker/data/batch_sampler.hpp), so that the same seed gives the same tokens with any compiler
// and standard library.
//
// A draw runs once per token of every sample, on the host, between a GPU's steps: over GPT-2's
// 50,257 logits it has to cost well under a step (about 0.5 ms on a GPU). So the weights are one
// vectorised pass of worker/math's exp in fp32 (about 1 ulp; glibc's exp in double, which a draw
// took before, was a scalar call per token), the walk to the drawn token skips whole chunks by
// their sums, top-k selects on the logits alone, and a nucleus is found by a radix selection on
// the weights' bits, not a sort; the passes that look for a few tokens among all of them test a
// chunk at a time as vectors before they look at its tokens one by one. Tokens are walked by id,
// so the draws do not depend on the order the standard library's partitions leave.
#pragma once

#include <cstdint>
#include <span>
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
  void keep_top_k(std::span<const float> logits);
  std::int32_t draw_by_id(double total);
  std::int32_t draw_from_nucleus(double total);

  SamplingOptions options_;
  Xoshiro256 rng_;
  // The id of the j-th kept token: without top-k every token is kept, and j is its id.
  std::int32_t id_of(size_t j) const { return ids_.empty() ? static_cast<std::int32_t>(j) : ids_[j]; }

  std::vector<float> logits_;         // (kept) top-k's kept tokens' logits, by id
  std::vector<std::int32_t> ids_;     // (kept) their ids; empty without top-k
  std::vector<float> weights_;        // (kept) exp((logit - max) / temperature)
  std::vector<double> chunk_sums_;    // (kept / kChunk) sums of the weights, chunk by chunk
  std::vector<float> selection_;      // top-k's working copy of the logits
  std::vector<std::uint32_t> order_;  // a nucleus's search: the kept tokens (indices) still candidates, by id
  std::vector<double> digit_sums_;    // a nucleus's search: the candidates' weights summed by their next digit
};

// The seed of sample `index` (from 0) of a command's `seed`: the seed itself for the first, so
// that one sample's text does not depend on how many were asked; for each further one the seed
// mixed with a splitmix64 output of its index, its own stream whether the samples run one after
// another or side by side. (Sample 2 of seed S is not sample 1 of seed S + 1.)
std::uint64_t sample_seed(std::uint64_t seed, int index);

}  // namespace xtrain
