#include "worker/model/token_decoder.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/math/bf16.hpp"

namespace xtrain {

StepLogits::StepLogits(const float* floats, int rows, int Vp, int V) : floats_(floats), rows_(rows), Vp_(Vp), V_(V) {}

StepLogits::StepLogits(const std::uint16_t* bf16, float* converted, int rows, int Vp, int V)
    : bf16_(bf16), converted_(converted), rows_(rows), Vp_(Vp), V_(V) {}

std::span<const float> StepLogits::row(int r) const {
  if (r < 0 || r >= rows_) {
    throw std::out_of_range("logits row " + std::to_string(r) + " of " + std::to_string(rows_));
  }
  const size_t offset = static_cast<size_t>(r) * static_cast<size_t>(Vp_);
  const size_t n = static_cast<size_t>(V_);
  if (bf16_ == nullptr) return {floats_ + offset, n};
  // A plain loop over the bits, which -O3 vectorises (this file's flags: worker/model/CMakeLists.txt).
  float* out = converted_ + offset;
  const std::uint16_t* in = bf16_ + offset;
  for (size_t i = 0; i < n; ++i) out[i] = math::float_from_bf16_bits(in[i]);
  return {out, n};
}

TokenDecoder::TokenDecoder(const ModelDims& dims, int rows) : dims_(dims) { reset_rows(rows); }

bool TokenDecoder::rows_share_window() const {
  return std::all_of(windows_.begin() + 1, windows_.end(), [&](const auto& w) { return w == windows_[0]; });
}

void TokenDecoder::reset() {
  for (std::vector<std::int32_t>& w : windows_) w.clear();
}

void TokenDecoder::reset_rows(int rows) {
  if (rows < 1) throw std::invalid_argument("decoder: " + std::to_string(rows) + " rows, expected at least 1");
  windows_.resize(static_cast<size_t>(rows));
  reset();
  for (std::vector<std::int32_t>& w : windows_) w.reserve(static_cast<size_t>(dims_.T));
}

StepLogits TokenDecoder::append(std::span<const std::int32_t> tokens) {
  if (tokens.empty()) throw std::out_of_range("decoder: no tokens to append");
  if (tokens.size() % windows_.size() != 0) {
    throw std::invalid_argument("decoder: " + std::to_string(tokens.size()) + " tokens for " +
                                std::to_string(windows_.size()) + " rows, not the same number for each");
  }
  const int n = static_cast<int>(tokens.size() / windows_.size());
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
  // Slide: keep the newest half (at most what leaves room) and run it again. Every window has the
  // same length, so all slide together.
  const int before = position();
  const bool slide = before + n > dims_.T;
  const int keep = slide ? std::min({before, dims_.T / 2, dims_.T - n}) : before;
  for (size_t r = 0; r < windows_.size(); ++r) {
    std::vector<std::int32_t>& w = windows_[r];
    if (slide) w.erase(w.begin(), w.end() - keep);
    const auto row = tokens.begin() + static_cast<std::ptrdiff_t>(r) * n;
    w.insert(w.end(), row, row + n);
  }
  return run(slide ? 0 : before);
}

}  // namespace xtrain
