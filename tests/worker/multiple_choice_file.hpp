// Multiple-choice eval files for the tests (the released HellaSwag file cannot be fetched here),
// built from the format's description in worker/data/multiple_choice.hpp: llm.c's
// write_evalfile layout, a 256-int32 header, then per example its uint16 stream.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace xtrain::test {

struct Example {
  int label;
  std::vector<int> context;
  std::vector<std::vector<int>> completions;
};

// The file's bytes for `examples`, with `magic` in the header (another value makes a bad file).
inline std::string eval_file(const std::vector<Example>& examples, std::int32_t magic = 20240522) {
  std::vector<std::uint16_t> stream;
  int longest = 0;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Example& x = examples[i];
    std::vector<std::uint16_t> e = {65535, 0, static_cast<std::uint16_t>(i), static_cast<std::uint16_t>(x.label),
                                    static_cast<std::uint16_t>(x.completions.size()),
                                    static_cast<std::uint16_t>(x.context.size())};
    e.insert(e.end(), x.context.begin(), x.context.end());
    for (const auto& c : x.completions) {
      e.push_back(static_cast<std::uint16_t>(c.size()));
      e.insert(e.end(), c.begin(), c.end());
    }
    e[1] = static_cast<std::uint16_t>(2 * e.size());
    longest = std::max(longest, static_cast<int>(e[1]));
    stream.insert(stream.end(), e.begin(), e.end());
  }
  std::vector<std::int32_t> header = {magic, 1, static_cast<std::int32_t>(examples.size()), longest};
  header.resize(256, 0);
  return std::string(reinterpret_cast<const char*>(header.data()), 1024) +
         std::string(reinterpret_cast<const char*>(stream.data()), stream.size() * 2);
}

// `count` examples of 4 completions with random tokens below `vocab`: contexts of 3 to 6 tokens,
// completions of 1 to 6 (so every row fits 11 positions), labels at random.
inline std::vector<Example> random_examples(int count, unsigned seed, int vocab) {
  std::vector<Example> examples;
  std::mt19937 rng(seed);
  const auto token = [&] { return static_cast<int>(rng() % static_cast<unsigned>(vocab)); };
  for (int i = 0; i < count; ++i) {
    Example x{static_cast<int>(rng() % 4), {}, {}};
    for (int t = 0; t < 3 + static_cast<int>(rng() % 4); ++t) x.context.push_back(token());
    for (int c = 0; c < 4; ++c) {
      x.completions.emplace_back();
      for (int t = 0; t < 1 + static_cast<int>(rng() % 6); ++t) x.completions.back().push_back(token());
    }
    examples.push_back(x);
  }
  return examples;
}

}  // namespace xtrain::test
