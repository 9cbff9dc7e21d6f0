#include "worker/model/window_decoder.hpp"

#include <algorithm>
#include <stdexcept>

namespace xtrain {

WindowDecoder::WindowDecoder(GPT& model)
    : TokenDecoder(model.dims()),
      model_(model),
      tokens_(static_cast<size_t>(model.dims().T), 0),
      logits_(static_cast<size_t>(model.dims().Vp)) {
  if (model.max_batch() < 1) throw std::invalid_argument("WindowDecoder: the model holds no sequence");
}

std::span<const float> WindowDecoder::run(int /*first*/) {
  std::copy(window().begin(), window().end(), tokens_.begin());
  model_.forward(tokens_.data(), nullptr, 1);
  const size_t last = static_cast<size_t>(position() - 1) * static_cast<size_t>(dims_.Vp);
  model_.backend().download(logits_.data(), model_.logits() + last, logits_.size());
  return {logits_.data(), logits_.size()};
}

}  // namespace xtrain
