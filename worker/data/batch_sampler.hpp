// Which token windows each step trains on, and which of them each rank computes.
//
// Every rank runs the same sampler with the same seed and draws the start of every sequence of
// the global batch; rank r of `world` then computes the sequences i with i % world == r. So the
// batch a step sees does not depend on the world size, the ranks' gradients average to the
// single-process gradient, and no rank ever talks to another about data. The sampler's whole
// state is four 64-bit words (xoshiro256**), saved in checkpoints so a resumed run draws exactly
// the batches the uninterrupted run would have.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "worker/data/token_source.hpp"

namespace xtrain {

struct SamplerState {
  std::array<std::uint64_t, 4> words{};  // xoshiro256** state
  bool operator==(const SamplerState&) const = default;
};

// splitmix64 (Steele, Lea and Flood): advances x and returns its next output, a 64-bit mix of it.
std::uint64_t splitmix64(std::uint64_t& x);

// xoshiro256** (Blackman and Vigna), seeded through splitmix64: small, fast, and its state is
// plain data. Fixed here so that batches do not change with the standard library.
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t seed);
  std::uint64_t next();
  std::uint64_t below(std::uint64_t n);  // uniform in [0, n), unbiased; n > 0
  SamplerState state() const { return state_; }
  void set_state(const SamplerState& s) { state_ = s; }

 private:
  SamplerState state_;
};

class BatchSampler {
 public:
  // Windows of seq_len + 1 tokens from `tokens` (which must hold at least that many).
  BatchSampler(TokenSpan tokens, int seq_len, std::uint64_t seed);

  // The next step's window starts, one per sequence i = 0 .. global_batch-1, each uniform in
  // [0, tokens - seq_len - 1]. Advances the state by exactly global_batch draws.
  std::vector<std::uint64_t> draw(int global_batch);

  SamplerState state() const { return rng_.state(); }
  void set_state(const SamplerState& s) { rng_.set_state(s); }
  const TokenSpan& tokens() const { return tokens_; }
  int seq_len() const { return seq_len_; }

 private:
  TokenSpan tokens_;
  int seq_len_;
  Xoshiro256 rng_;
};

// Validation windows: `num_sequences` starts spread evenly over the whole span (the first at 0,
// the last at tokens - seq_len - 1), the same at every evaluation.
std::vector<std::uint64_t> validation_starts(const TokenSpan& tokens, int seq_len, int num_sequences);

// Copies this rank's micro-batch `micro` of a step: row b (of B) is global sequence
// i = (micro * B + b) * world + rank, so a rank's micro-batches together hold exactly the
// sequences with i % world == rank. inputs (B, T) = window[0 .. T), targets (B, T) =
// window[1 .. T+1), T = seq_len. Throws std::invalid_argument when the batch does not split.
void gather_micro_batch(const TokenSpan& tokens, int seq_len, const std::vector<std::uint64_t>& starts, int rank,
                        int world, int micro, int B, std::int32_t* inputs, std::int32_t* targets);

}  // namespace xtrain
