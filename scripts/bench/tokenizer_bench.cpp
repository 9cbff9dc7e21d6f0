// Encoding throughput of our GPT-2 tokenizer on one thread, for scripts/bench/tokenizer.sh.
// Two figures per file: one pass with an empty piece cache (as on text never seen before), and
// repeated passes for at least SECONDS (the cache warm, as in the steady state of a large corpus
// whose frequent words repeat), each in MB per second of wall-clock time and MB per second of
// this thread's CPU time (what one core does even when other processes share the machine).
// Prints one line per file:
//   FILE BYTES TOKENS COLD_WALL COLD_CPU WARM_WALL WARM_CPU
// Usage: xtrain-bench-tokenizer VOCAB_DIR SECONDS FILE...
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/tokenizer/gpt2_tokenizer.hpp"

namespace {

struct Clock {
  double wall, cpu;  // seconds
  static Clock now() {
    timespec cpu{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    return {std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(),
            static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec)};
  }
  Clock operator-(const Clock& start) const { return {wall - start.wall, cpu - start.cpu}; }
};

}  // namespace

int main(int argc, char** argv) try {
  if (argc < 4) {
    std::fprintf(stderr, "usage: xtrain-bench-tokenizer VOCAB_DIR SECONDS FILE...\n");
    return 2;
  }
  const double min_seconds = std::atof(argv[2]);
  for (int f = 3; f < argc; ++f) {
    std::ifstream in(argv[f], std::ios::binary);
    std::ostringstream contents;
    contents << in.rdbuf();
    const std::string text = std::move(contents).str();
    if (!in || text.empty()) throw std::runtime_error(std::string(argv[f]) + ": cannot read, or empty");
    const double mb = static_cast<double>(text.size()) / 1e6;

    // A freshly loaded tokenizer starts this thread's cache empty.
    const auto tokenizer = xtrain::Gpt2Tokenizer::load(argv[1]);
    std::vector<std::int32_t> tokens;
    tokens.reserve(text.size());
    Clock start = Clock::now();
    tokenizer.encode(text, tokens);
    const Clock cold = Clock::now() - start;

    start = Clock::now();
    int passes = 0;
    Clock warm{};
    do {
      tokens.clear();
      tokenizer.encode(text, tokens);
      ++passes;
      warm = Clock::now() - start;
    } while (warm.wall < min_seconds);
    std::printf("%s %zu %zu %.2f %.2f %.2f %.2f\n", argv[f], text.size(), tokens.size(), mb / cold.wall, mb / cold.cpu,
                mb * passes / warm.wall, mb * passes / warm.cpu);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "xtrain-bench-tokenizer: error: %s\n", e.what());
  return 1;
}
