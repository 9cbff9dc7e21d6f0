// A TokenDecoder (worker/model/token_decoder.hpp) on GPT itself, on any backend: the way
// `generate` decodes on a GPU, and the trainer's samples on either device.
//   - A window that is new (the prompt, after a slide past the context, or tokens appended after
//     other work ran on the model) goes through GPT's forward: one sequence of T positions, the
//     ones past the window filler that a causal model never lets the window's own positions see.
//   - A token appended after the decoder's own last call is one step (GPT::forward_step): one
//     position of work, its attention reading the keys and values that the forward and steps
//     before left in GPT's qkv activations. A KV cache without memory of its own.
// The logits of the window's last position are downloaded (Vp floats, from the backend's
// activation dtype).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/token_decoder.hpp"

namespace xtrain {

class GptDecoder : public TokenDecoder {
 public:
  // `model` (max_batch >= 1, std::invalid_argument otherwise) must outlive the decoder.
  explicit GptDecoder(GPT& model);

 private:
  std::span<const float> run(int first) override;

  GPT& model_;
  std::uint64_t forwards_seen_ = 0;   // model_.forwards() after this decoder's last call; 0: none
  std::vector<std::int32_t> tokens_;  // (1,T) the window, then filler
  std::vector<float> logits_;         // (Vp)
};

}  // namespace xtrain
