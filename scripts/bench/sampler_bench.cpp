// What one draw of the next-token sampler (worker/train/token_sampler.hpp) costs on GPT-2's
// vocabulary: generate draws once per token of every sample, on the host, between a GPU's steps.
// The logits are Zipf-like, as a language model's are (p ~ 1 / (rank + 1)^1.1 over a random
// permutation of the 50,257 ids), the same every draw. Prints a Markdown table: per setting, the
// median of --runs runs (5 unless given) of the mean over --draws draws (300 unless given), us.
//
// Usage: xtrain-bench-sampler [--draws N] [--runs N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "worker/train/token_sampler.hpp"

using namespace xtrain;

int main(int argc, char** argv) {
  int draws = 300, runs = 5;
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (std::strcmp(argv[i], "--draws") == 0 && value) {
      draws = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--runs") == 0 && value) {
      runs = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: xtrain-bench-sampler [--draws N (300)] [--runs N (5)]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (draws < 1 || runs < 1) {
    std::fprintf(stderr, "xtrain-bench-sampler: --draws and --runs must be at least 1\n");
    return 2;
  }
  constexpr int kVocabulary = 50257;
  std::vector<int> rank(kVocabulary);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937(5));
  std::vector<float> logits(kVocabulary);
  for (size_t j = 0; j < logits.size(); ++j) logits[j] = static_cast<float>(-1.1 * std::log(rank[j] + 1.0));

  struct Setting {
    const char* name;
    SamplingOptions options;
  };
  const Setting settings[] = {{"greedy", {0.0, 0, 1.0}},
                              {"temperature 1 (the default)", {1.0, 0, 1.0}},
                              {"temperature 0.8, top-k 40", {0.8, 40, 1.0}},
                              {"temperature 0.8, top-p 0.95", {0.8, 0, 0.95}},
                              {"temperature 1, top-p 0.9", {1.0, 0, 0.9}}};
  std::printf("| setting | us per draw (GPT-2's 50,257 logits) |\n| --- | ---: |\n");
  for (const Setting& s : settings) {
    TokenSampler sampler(s.options, 1);
    std::vector<double> means;
    long checksum = 0;
    for (int r = 0; r < runs; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int d = 0; d < draws; ++d) checksum += sampler.next(logits);
      means.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / draws);
    }
    std::sort(means.begin(), means.end());
    std::printf("| %s | %.1f |\n", s.name, means[means.size() / 2]);
    if (checksum < 0) return 1;  // keeps the draws from being optimised away
  }
  return 0;
}
