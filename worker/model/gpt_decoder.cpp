#include "worker/model/gpt_decoder.hpp"

#include <algorithm>
#include <stdexcept>

namespace xtrain {

GptDecoder::GptDecoder(GPT& model)
    : TokenDecoder(model.dims()),
      model_(model),
      tokens_(static_cast<size_t>(model.dims().T), 0),
      logits_(static_cast<size_t>(model.dims().Vp)) {
  if (model.max_batch() < 1) throw std::invalid_argument("GptDecoder: the model holds no sequence");
}

std::span<const float> GptDecoder::run(int first) {
  const bool cached = forwards_seen_ != 0 && forwards_seen_ == model_.forwards();
  if (cached && first > 0 && position() - first == 1) {
    model_.forward_step(window().back(), first);
    count_positions(1);
    model_.backend().download(logits_.data(), model_.step_logits(), logits_.size());
  } else {
    std::copy(window().begin(), window().end(), tokens_.begin());
    model_.forward(tokens_.data(), nullptr, 1);
    count_positions(dims_.T);
    const size_t last = static_cast<size_t>(position() - 1) * static_cast<size_t>(dims_.Vp);
    model_.backend().download(logits_.data(), model_.logits() + last, logits_.size());
  }
  forwards_seen_ = model_.forwards();
  return {logits_.data(), logits_.size()};
}

}  // namespace xtrain
