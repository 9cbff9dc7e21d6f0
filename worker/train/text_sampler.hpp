// Text from a trained model, so a person can see what it learned: autoregressive sampling with a
// temperature and top-k, on the training model itself (worker/model/gpt_decoder.hpp: the prompt
// in one forward, then one position of work per token; past the context the window keeps its
// newest half, as generate's). The draws are generate's (worker/train/token_sampler.hpp, seeded as
// generate's first sample), so `xtrain-worker generate` on the run's last checkpoint with the same
// prompt, seed, temperature, top-k and number of tokens draws the same tokens wherever the two
// models' logits agree (an fp32 run: they differ in the order of their sums only), and ends where
// generate ends a sample: at the end-of-text token, if the vocabulary has one. The caller turns
// text into tokens and back: bytes for byte-level data, the GPT-2 tokenizer for token shards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xtrain {

class GPT;

struct SampleOptions {
  int tokens = 0;            // tokens to generate
  double temperature = 0.8;  // >= 0; 0: always the most likely token
  int top_k = 40;            // >= 0; 0: the whole vocabulary
  std::uint64_t seed = 0;
  std::optional<std::int32_t> end_token;  // drawn: the sample ends, without it (<|endoftext|>)
};

// Returns the generated tokens (without the prompt), each below the model's vocabulary V: `tokens`
// of them, or fewer where the end token was drawn (it is not returned).
// `prompt` must be non-empty with every token in [0, V) (std::out_of_range otherwise, from the
// decoder's TokenDecoder::append, before any work); only its last T tokens are seen. A negative
// temperature or top-k is std::invalid_argument (the job spec refuses them first).
std::vector<std::int32_t> sample_tokens(GPT& model, const std::vector<std::int32_t>& prompt, const SampleOptions& options);

// Text made safe for a terminal and for JSON: printable ASCII, newlines, tabs and well-formed
// UTF-8 characters kept; control characters and bytes that are not UTF-8 become '?'.
std::string printable(const std::string& bytes);

}  // namespace xtrain
