// The next-token sampler: greedy, its ties and NaNs, top-k and top-p keep exactly the tokens they name,
// draws follow the softmax of logits / temperature, and the same seed gives the same draws. On
// GPT-2's vocabulary with Zipf-like logits (as a language model's are), against a reference that
// sorts every token in double: the same kept tokens, and the draws' shares within 0.02 (4
// standard errors of 8,000 draws).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <map>
#include <vector>

#include "worker/train/token_sampler.hpp"

using namespace xtrain;

namespace {

// Draws `n` tokens; returns the share of each.
std::map<int, double> shares(TokenSampler& s, const std::vector<float>& logits, int n) {
  std::map<int, double> count;
  for (int i = 0; i < n; ++i) count[s.next(logits)] += 1.0 / n;
  return count;
}

}  // namespace

TEST_CASE("Greedy takes the most likely token, the lower id on a tie", "[sampler]") {
  TokenSampler s({.temperature = 0.0, .top_k = 0, .top_p = 1.0}, 1);
  CHECK(s.next(std::vector<float>{0.1f, 2.0f, -1.0f, 2.0f}) == 1);
  CHECK(s.next(std::vector<float>{3.0f, 2.0f}) == 0);
}

TEST_CASE("Greedy finds the largest logit anywhere, skips a later NaN and refuses a NaN first logit", "[sampler]") {
  // Lengths around the search's eight lanes (a tail of 0 to 7 past them) and GPT-2's vocabulary.
  TokenSampler s({.temperature = 0.0, .top_k = 0, .top_p = 1.0}, 1);
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> uniform(-5.0f, 5.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const size_t n : {1, 2, 7, 8, 9, 15, 16, 17, 50257}) {
    std::vector<float> logits(n);
    for (float& x : logits) x = uniform(rng);
    std::vector<size_t> at = {0, n / 2, n - 1};
    if (n > 9) at.insert(at.end(), {7, 8, n - 8});
    for (const size_t best : at) {
      INFO(n << " logits, the largest at " << best);
      std::vector<float> v = logits;
      v[best] = 6.0f;
      CHECK(s.next(v) == static_cast<std::int32_t>(best));
      const size_t other = best == n - 1 ? n / 2 : n - 1;  // a NaN after the first logit is no logit at all
      if (other != best && other != 0) {
        v[other] = nan;
        CHECK(s.next(v) == static_cast<std::int32_t>(best));
      }
    }
    logits[0] = nan;
    CHECK_THROWS_AS(s.next(logits), std::runtime_error);
  }
}

TEST_CASE("Draws follow softmax(logits / temperature)", "[sampler]") {
  // Probabilities 1/6, 2/6, 3/6 at temperature 1; at temperature 2 proportional to sqrt(1, 2, 3).
  const std::vector<float> logits = {0.0f, std::log(2.0f), std::log(3.0f)};
  TokenSampler one({.temperature = 1.0, .top_k = 0, .top_p = 1.0}, 7);
  const auto p = shares(one, logits, 60000);
  CHECK(p.at(0) == Approx(1.0 / 6).margin(0.01));
  CHECK(p.at(1) == Approx(2.0 / 6).margin(0.01));
  CHECK(p.at(2) == Approx(3.0 / 6).margin(0.01));
  TokenSampler two({.temperature = 2.0, .top_k = 0, .top_p = 1.0}, 7);
  const auto q = shares(two, logits, 60000);
  const double z = 1.0 + std::sqrt(2.0) + std::sqrt(3.0);
  CHECK(q.at(0) == Approx(1.0 / z).margin(0.01));
  CHECK(q.at(2) == Approx(std::sqrt(3.0) / z).margin(0.01));
}

TEST_CASE("Top-k and top-p keep exactly the most likely tokens they name", "[sampler]") {
  // Probabilities 0.1, 0.2, 0.3, 0.4 (ids 0..3).
  const std::vector<float> logits = {std::log(0.1f), std::log(0.2f), std::log(0.3f), std::log(0.4f)};
  TokenSampler k2({.temperature = 1.0, .top_k = 2, .top_p = 1.0}, 3);
  const auto p = shares(k2, logits, 40000);
  CHECK(p.size() == 2);
  CHECK(p.at(3) == Approx(4.0 / 7).margin(0.01));  // renormalised over the two kept
  CHECK(p.at(2) == Approx(3.0 / 7).margin(0.01));
  // top-p 0.65: 0.4 alone is short of it, 0.4 + 0.3 reaches it.
  TokenSampler nucleus({.temperature = 1.0, .top_k = 0, .top_p = 0.65}, 3);
  const auto q = shares(nucleus, logits, 40000);
  CHECK(q.size() == 2);
  CHECK(q.count(3) == 1);
  CHECK(q.count(2) == 1);
  // A tiny top-p is greedy.
  TokenSampler tiny({.temperature = 1.0, .top_k = 0, .top_p = 1e-6}, 3);
  const auto greedy = shares(tiny, logits, 100);
  CHECK(greedy.size() == 1);
  CHECK(greedy.count(3) == 1);
  // A nucleus inside one binary exponent of weight: 200 equal logits with top-p 0.9 keep 180 of
  // them.
  TokenSampler wide({.temperature = 1.0, .top_k = 0, .top_p = 0.9}, 5);
  const auto w = shares(wide, std::vector<float>(200, 1.0f), 20000);
  CHECK(w.size() == 180);
  CHECK(w.rbegin()->first == 179);  // the lower ids first on ties
}

TEST_CASE("On GPT-2's vocabulary the draws keep the reference's tokens, at its shares", "[sampler]") {
  // p ~ 1 / (rank + 1)^1.1 over the ranks of a random permutation of the ids.
  constexpr int V = 50257;
  std::vector<int> rank(V);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937(5));
  std::vector<float> logits(V);
  for (int j = 0; j < V; ++j) logits[static_cast<size_t>(j)] = static_cast<float>(-1.1 * std::log(rank[static_cast<size_t>(j)] + 1.0));
  for (const SamplingOptions o : {SamplingOptions{.temperature = 1.0, .top_k = 0, .top_p = 1.0},
                                  SamplingOptions{.temperature = 0.8, .top_k = 0, .top_p = 0.6},
                                  SamplingOptions{.temperature = 1.3, .top_k = 40, .top_p = 1.0},
                                  SamplingOptions{.temperature = 1.0, .top_k = 2000, .top_p = 0.5}}) {
    INFO("temperature " << o.temperature << ", top-k " << o.top_k << ", top-p " << o.top_p);
    // The reference: every token sorted by likelihood (ties to the lower id), weights in double.
    std::vector<int> sorted(V);
    std::iota(sorted.begin(), sorted.end(), 0);
    std::sort(sorted.begin(), sorted.end(), [&](int a, int b) {
      return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
             (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
    });
    if (o.top_k > 0) sorted.resize(static_cast<size_t>(o.top_k));
    std::vector<double> w;
    for (const int j : sorted) w.push_back(std::exp((logits[static_cast<size_t>(j)] - logits[static_cast<size_t>(sorted[0])]) / o.temperature));
    const double total = std::accumulate(w.begin(), w.end(), 0.0);
    size_t nucleus = 0;
    for (double c = 0.0; nucleus < w.size() && c < o.top_p * total; ++nucleus) c += w[nucleus];
    const double kept = std::accumulate(w.begin(), w.begin() + static_cast<long>(nucleus), 0.0);
    const std::set<int> allowed(sorted.begin(), sorted.begin() + static_cast<long>(nucleus));

    TokenSampler sampler(o, 11);
    const auto p = shares(sampler, logits, 8000);
    for (const auto& [token, share] : p) CHECK(allowed.count(token) == 1);
    for (size_t i = 0; i < 8 && i < nucleus; ++i) {
      INFO("the " << i + 1 << "th most likely token");
      const auto it = p.find(sorted[i]);
      CHECK((it == p.end() ? 0.0 : it->second) == Approx(w[i] / kept).margin(0.02));
    }
  }
}

TEST_CASE("The same seed gives the same tokens, another seed others", "[sampler]") {
  std::vector<float> logits(500);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(std::sin(i * 0.37));
  const SamplingOptions o{.temperature = 1.0, .top_k = 50, .top_p = 0.9};
  TokenSampler a(o, 42), b(o, 42), c(o, 43);
  std::vector<int> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.next(logits));
    tb.push_back(b.next(logits));
    tc.push_back(c.next(logits));
  }
  CHECK(ta == tb);
  CHECK(ta != tc);
}

TEST_CASE("Out-of-range options are refused, naming the flag", "[sampler]") {
  CHECK_THROWS_WITH(TokenSampler({.temperature = 1.0, .top_k = 0, .top_p = 0.0}, 0),
                    Catch::StartsWith("--top-p: expected a number in (0, 1]"));
  CHECK_THROWS_WITH(TokenSampler({.temperature = 1.0, .top_k = 0, .top_p = 1.5}, 0),
                    Catch::StartsWith("--top-p: expected a number in (0, 1]"));
  CHECK_THROWS_WITH(TokenSampler({.temperature = -0.5, .top_k = 0, .top_p = 1.0}, 0),
                    Catch::StartsWith("--temperature:"));
  CHECK_THROWS_WITH(TokenSampler({.temperature = 1.0, .top_k = -1, .top_p = 1.0}, 0), Catch::StartsWith("--top-k:"));
}
