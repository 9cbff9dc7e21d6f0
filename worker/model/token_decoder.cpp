#include "worker/model/token_decoder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xtrain {

TokenDecoder::TokenDecoder(const ModelDims& dims) : dims_(dims) { window_.reserve(static_cast<size_t>(dims.T)); }

std::span<const float> TokenDecoder::append(std::span<const std::int32_t> tokens) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw std::out_of_range("decoder: no tokens to append");
  if (n > dims_.T) {
    throw std::length_error(std::to_string(n) + " tokens at once, more than the model's context of " +
                            std::to_string(dims_.T));
  }
  for (const std::int32_t t : tokens) {
    if (t < 0 || t >= dims_.V) {
      throw std::out_of_range("token " + std::to_string(t) + " is outside the vocabulary [0, " +
                              std::to_string(dims_.V) + ")");
    }
  }
  int first = position();
  if (position() + n > dims_.T) {  // slide: keep the newest half (at most what leaves room), run it again
    const int keep = std::min({position(), dims_.T / 2, dims_.T - n});
    window_.erase(window_.begin(), window_.end() - keep);
    first = 0;
  }
  window_.insert(window_.end(), tokens.begin(), tokens.end());
  return run(first);
}

}  // namespace xtrain
