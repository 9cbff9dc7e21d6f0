#include "worker/data/batch_sampler.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace xtrain {
namespace {

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Windows of T + 1 tokens fit at starts 0 .. count - T - 1.
std::uint64_t window_positions(const TokenSpan& tokens, int seq_len) {
  const auto window = static_cast<std::uint64_t>(seq_len) + 1;
  if (seq_len < 1 || tokens.count < window) {
    throw std::invalid_argument("token span of " + std::to_string(tokens.count) + " tokens cannot serve windows of " +
                                std::to_string(window));
  }
  return tokens.count - window + 1;
}

}  // namespace

std::uint64_t splitmix64(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Xoshiro256::Xoshiro256(std::uint64_t seed) {
  for (auto& w : state_.words) w = splitmix64(seed);
}

std::uint64_t Xoshiro256::next() {
  auto& s = state_.words;
  const std::uint64_t result = rotl(s[1] * 5, 7) * 9;
  const std::uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

std::uint64_t Xoshiro256::below(std::uint64_t n) {
  // Lemire's multiply-and-reject: the high word of x * n is uniform once the low word is
  // outside the short biased stretch.
  unsigned __int128 product = static_cast<unsigned __int128>(next()) * n;
  auto low = static_cast<std::uint64_t>(product);
  if (low < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (low < threshold) {
      product = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<std::uint64_t>(product);
    }
  }
  return static_cast<std::uint64_t>(product >> 64);
}

BatchSampler::BatchSampler(TokenSpan tokens, int seq_len, std::uint64_t seed)
    : tokens_(std::move(tokens)), seq_len_(seq_len), rng_(seed) {
  window_positions(tokens_, seq_len_);
}

std::vector<std::uint64_t> BatchSampler::draw(int global_batch) {
  const std::uint64_t positions = window_positions(tokens_, seq_len_);
  std::vector<std::uint64_t> starts(static_cast<size_t>(global_batch));
  for (auto& s : starts) s = rng_.below(positions);
  return starts;
}

std::vector<std::uint64_t> validation_starts(const TokenSpan& tokens, int seq_len, int num_sequences) {
  const std::uint64_t last = window_positions(tokens, seq_len) - 1;
  std::vector<std::uint64_t> starts(static_cast<size_t>(num_sequences));
  for (size_t j = 0; j < starts.size(); ++j) {
    // j * last / (n - 1) in 128 bits: exact for any corpus size.
    const auto n = static_cast<std::uint64_t>(num_sequences);
    starts[j] = n == 1 ? 0 : static_cast<std::uint64_t>(static_cast<unsigned __int128>(j) * last / (n - 1));
  }
  return starts;
}

void gather_micro_batch(const TokenSpan& tokens, int seq_len, const std::vector<std::uint64_t>& starts, int rank,
                        int world, int micro, int B, std::int32_t* inputs, std::int32_t* targets) {
  if (world < 1 || rank < 0 || rank >= world || B < 1 || micro < 0 || starts.size() % static_cast<size_t>(world) != 0 ||
      static_cast<size_t>(micro + 1) * static_cast<size_t>(B) * static_cast<size_t>(world) > starts.size()) {
    throw std::invalid_argument("micro-batch " + std::to_string(micro) + " of " + std::to_string(B) +
                                " sequences for rank " + std::to_string(rank) + " of " + std::to_string(world) +
                                " does not fit a batch of " + std::to_string(starts.size()));
  }
  const std::uint64_t positions = window_positions(tokens, seq_len);
  const auto T = static_cast<size_t>(seq_len);
  std::vector<std::int32_t> window(T + 1);
  for (int b = 0; b < B; ++b) {
    const size_t i = (static_cast<size_t>(micro) * B + b) * world + rank;
    if (starts[i] >= positions)
      throw std::invalid_argument("window start " + std::to_string(starts[i]) + " out of range");
    tokens.copy(starts[i], T + 1, window.data());
    std::copy(window.begin(), window.end() - 1, inputs + b * T);
    std::copy(window.begin() + 1, window.end(), targets + b * T);
  }
}

}  // namespace xtrain
