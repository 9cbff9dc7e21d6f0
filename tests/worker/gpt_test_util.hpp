// What the GPT unit tests share: model shapes in one line, a tiny model with every layer kind,
// GPT-2 124M's shape, and reproducible tokens.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/job_spec.hpp"

namespace xtrain::test {

// L layers of NH heads, C channels, T positions, a vocabulary of V (padded to a multiple of 128);
// the other fields keep their defaults.
inline ModelSpec model_spec(int L, int NH, int C, int T, int V) {
  ModelSpec m;
  m.n_layer = L;
  m.n_head = NH;
  m.n_embd = C;
  m.seq_len = T;
  m.vocab_size = V;
  return m;
}

// 2 layers of 2 heads, 32 channels, 16 positions, a vocabulary of 50 (padded to 64).
inline ModelSpec tiny_model() {
  return model_spec(2, 2, 32, 16, 50);
}

// GPT-2 124M: 12 layers of 12 heads, 768 channels, 1024 positions, GPT-2's vocabulary.
inline ModelSpec gpt2_124m() {
  return model_spec(12, 12, 768, 1024, 50257);
}

// `n` tokens below `V`, the same for the same seed.
inline std::vector<int32_t> random_tokens(size_t n, int V, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<unsigned>(V));
  return v;
}

}  // namespace xtrain::test
