#include "worker/train/token_sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace xtrain {
namespace {

bool more_likely(const std::pair<float, std::int32_t>& a, const std::pair<float, std::int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

}  // namespace

TokenSampler::TokenSampler(const SamplingOptions& options, std::uint64_t seed) : options_(options), rng_(seed) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    throw std::invalid_argument("--temperature: expected a number >= 0 (0: greedy), got " +
                                std::to_string(options.temperature));
  }
  if (options.top_k < 0) {
    throw std::invalid_argument("--top-k: expected an integer >= 0 (0: no limit), got " + std::to_string(options.top_k));
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) {
    throw std::invalid_argument("--top-p: expected a number in (0, 1], got " + std::to_string(options.top_p));
  }
}

double TokenSampler::uniform() { return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53; }

std::int32_t TokenSampler::next(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("TokenSampler::next: no logits");
  if (options_.temperature == 0.0) {
    // max_element keeps the first of equal values: the lower id.
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  candidates_.resize(logits.size());
  for (size_t j = 0; j < logits.size(); ++j) candidates_[j] = {logits[j], static_cast<std::int32_t>(j)};
  size_t kept = candidates_.size();
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < kept) {
    kept = static_cast<size_t>(options_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + static_cast<long>(kept) - 1, candidates_.end(),
                     more_likely);
    candidates_.resize(kept);
  }
  // Weights exp((l - max) / temperature) in double; the normaliser is over every kept candidate.
  const float top = std::max_element(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) {
                      return a.first < b.first;
                    })->first;
  const auto weight = [&](float l) { return std::exp((static_cast<double>(l) - top) / options_.temperature); };
  double total = 0.0;
  for (const auto& c : candidates_) total += weight(c.first);
  if (options_.top_p < 1.0) {
    // The nucleus: the most likely candidates, in order, until their share reaches top_p. Sorting
    // the whole vocabulary per token would cost milliseconds; the nucleus is usually short, so
    // sort a front that doubles until it holds it.
    const double target = options_.top_p * total;
    size_t sorted = 0, front = 64;
    double cumulative = 0.0;
    size_t nucleus = 0;
    while (nucleus == 0) {
      front = std::min(front, candidates_.size());
      std::partial_sort(candidates_.begin() + static_cast<long>(sorted), candidates_.begin() + static_cast<long>(front),
                        candidates_.end(), more_likely);
      for (size_t j = sorted; j < front; ++j) {
        cumulative += weight(candidates_[j].first);
        if (cumulative >= target || j + 1 == candidates_.size()) {
          nucleus = j + 1;
          break;
        }
      }
      sorted = front;
      front *= 2;
    }
    candidates_.resize(nucleus);
    total = cumulative;
  } else if (kept < logits.size()) {
    // The draw walks the candidates in an order of our own (nth_element's is the library's): by id.
    std::sort(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  }
  const double u = uniform() * total;
  double cumulative = 0.0;
  for (const auto& c : candidates_) {
    cumulative += weight(c.first);
    if (u < cumulative) return c.second;
  }
  return candidates_.back().second;  // u within rounding of the total
}

std::uint64_t sample_seed(std::uint64_t seed, int index) {
  if (index == 0) return seed;
  std::uint64_t x = static_cast<std::uint64_t>(index);
  return seed ^ splitmix64(x);
}

}  // namespace xtrain
