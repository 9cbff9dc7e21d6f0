// What the GPT unit tests share: a tiny model with every layer kind, GPT-2 124M's shape, and
// reproducible tokens.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/job_spec.hpp"

namespace xtrain::test {

// 2 layers of 2 heads, 32 channels, 16 positions, a vocabulary of 50 (padded to 64).
inline ModelSpec tiny_model() {
  ModelSpec m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 32;
  m.seq_len = 16;
  m.vocab_size = 50;
  return m;
}

// GPT-2 124M: 12 layers of 12 heads, 768 channels, 1024 positions, GPT-2's vocabulary.
inline ModelSpec gpt2_124m() {
  ModelSpec m;
  m.n_layer = 12;
  m.n_head = 12;
  m.n_embd = 768;
  m.seq_len = 1024;
  m.vocab_size = 50257;
  return m;
}

// `n` tokens below `V`, the same for the same seed.
inline std::vector<int32_t> random_tokens(size_t n, int V, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(rng() % static_cast<unsigned>(V));
  return v;
}

}  // namespace xtrain::test
