// What one draw of the next-token sampler (worker/train/token_sampler.hpp) costs on GPT-2's
// vocabulary: generate draws once per token of every sample, on the host, between a GPU's steps.
// The logits are Zipf-like, as a language model's are (p ~ 1 / (rank + 1)^1.1 over a random
// permutation of the 50,257 ids), the same every draw. Prints a Markdown table: per setting, the
// median of --runs runs (5 unless given) of the mean over --draws draws (300 unless given), us:
//   - one draw;
//   - a step of 16 samples side by side (generate's most rows), each row drawing from its own
//     sampler: one row after another, and on a ThreadTeam of one member a row up to the usable
//     CPUs, as generate draws them. Between two steps the thread waits --gap-us (500 unless
//     given: a GPU's step of 16), untimed, so the team's helpers have gone to sleep as they have
//     in generate, and each timed step includes waking them;
//   - the same step on the team from a GPU's bf16 logits (rows of 50,304, the padded vocabulary),
//     as the CUDA backend left them on the host: converted to floats in one pass on the calling
//     thread first (the backend's download until 2026-12-06), or each row by the member that
//     draws it (worker/model/token_decoder.hpp, StepLogits: generate's way now).
//
// Usage: xtrain-bench-sampler [--draws N] [--runs N] [--gap-us N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include "common/usable_cpus.hpp"
#include "worker/math/bf16.hpp"
#include "worker/cpu/thread_team.hpp"
#include "worker/model/token_decoder.hpp"
#include "worker/train/token_sampler.hpp"

using namespace xtrain;

namespace {

constexpr int kRows = 16;

// The median of `runs` means over `steps` calls of `step`, us, with `gap` waited (untimed) before each.
template <typename Step>
double median_us(int runs, int steps, std::chrono::microseconds gap, Step&& step) {
  std::vector<double> means;
  for (int r = 0; r < runs; ++r) {
    double total = 0.0;
    for (int n = 0; n < steps; ++n) {
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
      const auto t0 = std::chrono::steady_clock::now();
      step();
      total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    }
    means.push_back(total / steps);
  }
  std::sort(means.begin(), means.end());
  return means[means.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int draws = 300, runs = 5, gap_us = 500;
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (std::strcmp(argv[i], "--draws") == 0 && value) {
      draws = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--runs") == 0 && value) {
      runs = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--gap-us") == 0 && value) {
      gap_us = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: xtrain-bench-sampler [--draws N (300)] [--runs N (5)] [--gap-us N (500)]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (draws < 1 || runs < 1 || gap_us < 0) {
    std::fprintf(stderr, "xtrain-bench-sampler: --draws and --runs must be at least 1, --gap-us at least 0\n");
    return 2;
  }
  constexpr int kVocabulary = 50257, kPadded = 50304;
  std::vector<int> rank(kVocabulary);
  std::iota(rank.begin(), rank.end(), 0);
  std::shuffle(rank.begin(), rank.end(), std::mt19937(5));
  std::vector<float> logits(kVocabulary);
  for (size_t j = 0; j < logits.size(); ++j) logits[j] = static_cast<float>(-1.1 * std::log(rank[j] + 1.0));
  std::vector<std::uint16_t> bf16(static_cast<size_t>(kRows) * kPadded);  // (kRows, kPadded) a GPU step's logits
  for (size_t i = 0; i < bf16.size(); ++i) {
    const size_t j = i % kPadded;
    bf16[i] = math::bf16_bits_from_float(j < logits.size() ? logits[j] : 0.0f);
  }
  std::vector<float> converted(bf16.size());  // (kRows, kPadded)

  struct Setting {
    const char* name;
    SamplingOptions options;
  };
  const Setting settings[] = {{"greedy", {0.0, 0, 1.0}},
                              {"temperature 1 (the default)", {1.0, 0, 1.0}},
                              {"temperature 0.8, top-k 40", {0.8, 40, 1.0}},
                              {"temperature 0.8, top-p 0.95", {0.8, 0, 0.95}},
                              {"temperature 1, top-p 0.9", {1.0, 0, 0.9}}};
  const int members = std::min(kRows, static_cast<int>(usable_cpus()));
  ThreadTeam team(members);
  const std::chrono::microseconds gap(gap_us);
  const char* plural = members == 1 ? "" : "s";
  std::printf("| setting | us per draw (GPT-2's 50,257 logits) | us per step of %d rows, one after another | "
              "on %d thread%s | from bf16, converted in one pass first, on %d thread%s | from bf16, each row "
              "converted by its thread |\n| --- | ---: | ---: | ---: | ---: | ---: |\n",
              kRows, members, plural, members, plural);
  long checksum = 0;  // keeps the draws from being optimised away
  for (const Setting& s : settings) {
    TokenSampler sampler(s.options, 1);
    const double one = median_us(runs, draws, std::chrono::microseconds(0), [&] { checksum += sampler.next(logits); });
    std::vector<TokenSampler> rows;
    for (int r = 0; r < kRows; ++r) rows.emplace_back(s.options, sample_seed(1, r));
    const auto draw = [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) checksum += rows[r].next(logits);
    };
    const int steps = std::max(1, draws / kRows);
    const double in_turn = median_us(runs, steps, gap, [&] { draw(0, kRows); });
    const double on_team = median_us(runs, steps, gap, [&] { team.split(kRows, 1, 1, draw); });
    const auto draw_converted = [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        checksum += rows[r].next(std::span<const float>(converted).subspan(r * kPadded, kVocabulary));
      }
    };
    const double one_pass = median_us(runs, steps, gap, [&] {
      for (size_t i = 0; i < bf16.size(); ++i) converted[i] = math::float_from_bf16_bits(bf16[i]);
      team.split(kRows, 1, 1, draw_converted);
    });
    const StepLogits step(bf16.data(), converted.data(), kRows, kPadded, kVocabulary);
    const auto draw_rows = [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) checksum += rows[r].next(step.row(static_cast<int>(r)));
    };
    const double per_row = median_us(runs, steps, gap, [&] { team.split(kRows, 1, 1, draw_rows); });
    std::printf("| %s | %.1f | %.0f | %.0f | %.0f | %.0f |\n", s.name, one, in_turn, on_team, one_pass, per_row);
  }
  return checksum < 0 ? 1 : 0;
}
