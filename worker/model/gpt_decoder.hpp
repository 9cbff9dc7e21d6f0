// A TokenDecoder (worker/model/token_decoder.hpp) on GPT itself, on any backend: the way
// `generate` decodes on a GPU, and the trainer's samples on either device. Its rows are GPT's
// sequences [0, rows): the samples of one prompt, side by side.
//   - Windows that are new (the prompt, after a slide past the context, or tokens appended after
//     other work ran on the model) go through GPT's forward (GPT::forward_window): rows sequences
//     of T positions, the ones past the windows filler that a causal model never lets the windows'
//     own positions see, and the head on each window's last position only. Rows whose windows
//     are all the same (generate's prompt, before the samples part) run as one sequence, then
//     copied (GPT::copy_first_sequence).
//   - A token a row appended after the decoder's own last call is one step (GPT::forward_step):
//     one position of work a row, its attention reading the keys and values that the forward and
//     steps before left in GPT's qkv activations. A KV cache without memory of its own.
// The logits of each window's last position are read where the backend leaves them on the host
// (Backend::download_view: no copy), in its activation dtype; bf16 rows become floats as they are
// asked for (StepLogits).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/token_decoder.hpp"

namespace xtrain {

class GptDecoder : public TokenDecoder {
 public:
  // `model` must outlive the decoder; rows in [1, model.max_batch()] (std::invalid_argument
  // otherwise).
  explicit GptDecoder(GPT& model, int rows = 1);

 private:
  StepLogits run(int first) override;

  GPT& model_;
  std::uint64_t forwards_seen_ = 0;   // model_.forwards() after this decoder's last call; 0: none
  std::vector<std::int32_t> tokens_;  // (rows,T) the windows, then filler
  std::vector<std::int32_t> step_tokens_;  // (rows) a step's new tokens
  std::vector<float> converted_;      // (rows,Vp) bf16 logits as floats; empty for fp32 activations
};

}  // namespace xtrain
