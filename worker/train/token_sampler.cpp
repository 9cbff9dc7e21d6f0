#include "worker/train/token_sampler.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "common/number_format.hpp"
#include "worker/math/bf16.hpp"  // float_bits
#include "worker/math/exp.hpp"

namespace xtrain {
namespace {

// Tokens walked in chunks: a draw skips a chunk by its sum, so it walks at most one chunk's tokens.
constexpr size_t kChunk = 64;

// The sum of w[0, n) in double, in four running sums so that the adds do not wait on each other.
double sum_weights(const float* w, size_t n) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    s[0] += w[j];
    s[1] += w[j + 1];
    s[2] += w[j + 2];
    s[3] += w[j + 3];
  }
  for (; j < n; ++j) s[0] += w[j];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// The largest logit, in loops without branches to mispredict (std::max_element's branch took
// 4 ns a logit on this project's build VM) and in eight running maxima, so that the comparisons do
// not wait on each other (one chain of them took 1.7 ns a logit there) and run as vectors. Not
// worker/math's row_max: its lanes start at -inf and a later logit of the lane replaces a NaN,
// where greedy must see a NaN first logit (and refuse it). Here every lane starts at the first
// logit, and std::max keeps a NaN it holds: a NaN first logit is the result, a later one ignored.
float largest(std::span<const float> logits) {
  constexpr size_t kLanes = 8;
  std::array<float, kLanes> top;
  top.fill(logits[0]);
  const size_t n = logits.size();
  size_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (size_t l = 0; l < kLanes; ++l) top[l] = std::max(top[l], logits[j + l]);
  }
  for (; j < n; ++j) top[0] = std::max(top[0], logits[j]);
  float best = top[0];
  for (size_t l = 1; l < kLanes; ++l) best = std::max(best, top[l]);
  return best;
}

// Calls visit(j), in order, for the j in [first, n) of each kChunk-aligned chunk of x where
// `pass` holds for some x[j], until a visit returns true; the other chunks are skipped after one
// test of all their values, without a branch per value, so that it runs as vectors (a compare and
// branch per value took about 1.3 ns on the build VM). For the passes that look for a few tokens
// among all of them. `pass` is asked again for each chunk: it may read what the visits change.
template <typename Pass, typename Visit>
void visit_chunks_where(const float* x, size_t first, size_t n, const Pass& pass, const Visit& visit) {
  while (first < n) {
    const size_t end = std::min(n, (first / kChunk + 1) * kChunk);
    int any = 0;
    for (size_t j = first; j < end; ++j) any |= pass(x[j]) ? 1 : 0;
    if (any != 0) {
      for (size_t j = first; j < end; ++j) {
        if (visit(j)) return;
      }
    }
    first = end;
  }
}

// w[j] = exp((logits[j] - top) * inverse). Cloned for x86-64-v3 (AVX2 and FMA; the loader picks
// the clone where the CPU has them) and built at -O3 (worker/train/CMakeLists.txt), so that the
// loop runs 8 wide: 19 us for GPT-2's 50,257 logits on the build VM, against 430 us at -O2, where
// GCC leaves it scalar.
__attribute__((target_clones("arch=x86-64-v3", "default"))) void exp_weights(const float* logits, size_t n, float top,
                                                                             float inverse, float* w) {
  for (size_t j = 0; j < n; ++j) w[j] = math::exp_fast((logits[j] - top) * inverse);
}

}  // namespace

TokenSampler::TokenSampler(const SamplingOptions& options, std::uint64_t seed) : options_(options), rng_(seed) {
  if (!(options.temperature >= 0.0) || !std::isfinite(options.temperature)) {
    throw std::invalid_argument("--temperature: expected a number >= 0 (0: greedy), got " +
                                format_number(options.temperature));
  }
  if (options.top_k < 0) {
    throw std::invalid_argument("--top-k: expected an integer >= 0 (0: no limit), got " + std::to_string(options.top_k));
  }
  if (!(options.top_p > 0.0 && options.top_p <= 1.0)) {
    throw std::invalid_argument("--top-p: expected a number in (0, 1], got " + format_number(options.top_p));
  }
}

double TokenSampler::uniform() { return static_cast<double>(rng_.next() >> 11) * 0x1.0p-53; }

std::int32_t TokenSampler::next(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("TokenSampler::next: no logits");
  if (options_.temperature == 0.0) {  // the first of equal values: the lower id
    const auto best = std::find(logits.begin(), logits.end(), largest(logits));
    if (best == logits.end()) throw std::runtime_error("TokenSampler::next: the first logit is NaN");
    return static_cast<std::int32_t>(best - logits.begin());
  }
  // The kept tokens' logits: top-k's copy, or without it the caller's own (every token, its id
  // its index: no copy, and ids_ stays empty).
  std::span<const float> kept = logits;
  ids_.clear();
  if (options_.top_k > 0 && static_cast<size_t>(options_.top_k) < logits.size()) {
    keep_top_k(logits);
    kept = logits_;
  }
  const size_t n = kept.size();
  const float top = largest(kept);
  // Weights exp((l - max) / temperature), 1 for the most likely. A temperature so small that its
  // inverse passes fp32's range scales by 1e30 instead: every other token's weight is then
  // exp's floor, about 1e-38, as it would be anyway.
  const float inverse = static_cast<float>(std::min(1.0 / options_.temperature, 1e30));
  weights_.resize(n);
  exp_weights(kept.data(), n, top, inverse, weights_.data());
  chunk_sums_.resize((n + kChunk - 1) / kChunk);
  double total = 0.0;
  for (size_t c = 0; c < chunk_sums_.size(); ++c) {
    chunk_sums_[c] = sum_weights(weights_.data() + c * kChunk, std::min(kChunk, n - c * kChunk));
    total += chunk_sums_[c];
  }
  return options_.top_p < 1.0 ? draw_from_nucleus(total) : draw_by_id(total);
}

// The top_k most likely tokens (ties to the lower id), by id: the k-th largest logit, then one
// pass keeps those above it and the lowest ids of those at it. The k-th largest from a heap of the
// k largest so far (most logits fail one comparison with its least), or for a large k a selection
// on a copy (nth_element: 0.4 ms on GPT-2's 50,257 logits on the build VM). Both passes look at
// a chunk's logits one by one only where one of them can pass (visit_chunks_where).
void TokenSampler::keep_top_k(std::span<const float> logits) {
  constexpr size_t kHeapLargest = 1024;
  const size_t k = static_cast<size_t>(options_.top_k);
  const size_t n = logits.size();
  float kth = 0.0f;
  if (k <= kHeapLargest) {
    selection_.assign(logits.begin(), logits.begin() + static_cast<std::ptrdiff_t>(k));
    std::make_heap(selection_.begin(), selection_.end(), std::greater<float>());  // the least on top
    const auto least = [&](float x) { return x > selection_.front(); };
    visit_chunks_where(logits.data(), k, n, least, [&](size_t j) {
      if (least(logits[j])) {
        std::pop_heap(selection_.begin(), selection_.end(), std::greater<float>());
        selection_.back() = logits[j];
        std::push_heap(selection_.begin(), selection_.end(), std::greater<float>());
      }
      return false;
    });
    kth = selection_.front();
  } else {
    selection_.assign(logits.begin(), logits.end());
    std::nth_element(selection_.begin(), selection_.begin() + static_cast<std::ptrdiff_t>(k - 1), selection_.end(),
                     std::greater<float>());
    kth = selection_[k - 1];
  }
  size_t at_kth = k - static_cast<size_t>(std::count_if(logits.begin(), logits.end(), [&](float x) { return x > kth; }));
  logits_.clear();
  ids_.clear();
  visit_chunks_where(logits.data(), 0, n, [kth](float x) { return x >= kth; }, [&](size_t j) {
    const bool keep = logits[j] > kth || (logits[j] == kth && at_kth > 0);
    if (keep) {
      if (logits[j] == kth) --at_kth;
      logits_.push_back(logits[j]);
      ids_.push_back(static_cast<std::int32_t>(j));
    }
    return false;
  });
}

// u uniform in [0, total), walked over the kept tokens by id: whole chunks by their sums, then the
// tokens of the chunk it falls in.
std::int32_t TokenSampler::draw_by_id(double total) {
  const double u = uniform() * total;
  double cumulative = 0.0;
  size_t c = 0;
  while (c + 1 < chunk_sums_.size() && cumulative + chunk_sums_[c] <= u) cumulative += chunk_sums_[c++];
  const size_t end = std::min(weights_.size(), (c + 1) * kChunk);
  for (size_t j = c * kChunk; j < end; ++j) {
    cumulative += weights_[j];
    if (u < cumulative) return id_of(j);
  }
  // u within rounding of the chunk's sum (its tokens were added in another order): the last token
  // there with any weight.
  for (size_t j = end; j-- > 0;) {
    if (weights_[j] > 0.0f) return id_of(j);
  }
  return id_of(0);
}

// The nucleus: the fewest most likely tokens (ties to the lower id) whose weights reach top_p of
// `total`; then u uniform in [0, their sum), walked over them by id. The tokens are not sorted
// (50,257 of them took milliseconds): the nucleus's least weight is found by a radix selection
// from the top (positive floats order as their bit patterns). At each level the tokens that share
// the digits so far are summed by their next digit, and the digits, largest first, are added to
// the nucleus until one crosses the target: it is the next digit. What is left shares every bit,
// ties taken by id. The first digit is 12 bits (the sign, the exponent and 3 bits of the
// mantissa: a weight to within 9%), so that it leaves few candidates of a whole vocabulary; with
// 8 bits (two exponents a digit) it left thousands for three more passes.
std::int32_t TokenSampler::draw_from_nucleus(double total) {
  struct Digit {
    int shift;
    std::uint32_t mask;
  };
  constexpr std::array<Digit, 3> kDigits = {{{20, 0xfffu}, {10, 0x3ffu}, {0, 0x3ffu}}};
  const double target = options_.top_p * total;
  const size_t n = weights_.size();
  const auto bits_of = [&](std::uint32_t j) { return math::float_bits(weights_[j]); };
  double kept = 0.0;  // the weights of the tokens found more likely than the candidates left
  std::uint32_t cut = 0;
  for (size_t level = 0; level < kDigits.size(); ++level) {
    const auto [shift, mask] = kDigits[level];
    const auto digit_of = [&](std::uint32_t j) { return (bits_of(j) >> shift) & mask; };
    digit_sums_.assign(mask + 1, 0.0);
    if (level == 0) {  // every token is a candidate
      for (std::uint32_t j = 0; j < n; ++j) digit_sums_[digit_of(j)] += weights_[j];
    } else {
      for (const std::uint32_t j : order_) digit_sums_[digit_of(j)] += weights_[j];
    }
    std::uint32_t digit = mask;
    while (digit > 0 && kept + digit_sums_[digit] < target) kept += digit_sums_[digit--];
    cut |= digit << shift;
    if (level == 0) {  // the few tokens of that digit, found chunk by chunk
      order_.clear();
      const auto of_digit = [shift, mask, digit](float w) { return ((math::float_bits(w) >> shift) & mask) == digit; };
      visit_chunks_where(weights_.data(), 0, n, of_digit, [&](size_t j) {
        if (of_digit(weights_[j])) order_.push_back(static_cast<std::uint32_t>(j));
        return false;
      });
    } else {
      std::erase_if(order_, [&](std::uint32_t j) { return digit_of(j) != digit; });
    }
  }
  // order_: the tokens of weight `cut`, by id; the nucleus takes them until it reaches the target
  // (none when rounding left the target short of every digit).
  size_t ties = 0;
  while (ties < order_.size() && kept < target) kept += weights_[order_[ties++]];
  const double u = uniform() * kept;
  double walked = 0.0;
  size_t last = 0;  // the drawn token, or the nucleus's last where u is within rounding of its sum
  visit_chunks_where(weights_.data(), 0, n, [cut](float w) { return math::float_bits(w) >= cut; }, [&](size_t j) {
    const std::uint32_t bits = bits_of(static_cast<std::uint32_t>(j));
    if (bits < cut) return false;
    if (bits == cut) {
      if (ties == 0) return false;
      --ties;
    }
    walked += weights_[j];
    last = j;
    return u < walked;
  });
  return id_of(last);
}

std::uint64_t sample_seed(std::uint64_t seed, int index) {
  if (index == 0) return seed;
  std::uint64_t x = static_cast<std::uint64_t>(index);
  return seed ^ splitmix64(x);
}

}  // namespace xtrain
