// A TokenDecoder (worker/model/token_decoder.hpp) that runs GPT's forward over the whole window
// for every call, on any backend: the way `generate` decodes on a GPU, where the decoder has no
// KV cache of its own (llm.c samples the same way). A call costs a forward of one sequence of T
// positions, whatever the window holds: the positions past it are filler that a causal model
// never lets the window's own positions see. The logits of the window's last position are
// downloaded (Vp floats, from the backend's activation dtype).
#pragma once

#include <span>
#include <vector>

#include "worker/model/gpt.hpp"
#include "worker/model/token_decoder.hpp"

namespace xtrain {

class WindowDecoder : public TokenDecoder {
 public:
  // `model` (max_batch >= 1, std::invalid_argument otherwise) must outlive the decoder.
  explicit WindowDecoder(GPT& model);

 private:
  std::span<const float> run(int first) override;

  GPT& model_;
  std::vector<std::int32_t> tokens_;  // (1,T) the window, then filler
  std::vector<float> logits_;         // (Vp)
};

}  // namespace xtrain
