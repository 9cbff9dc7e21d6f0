// Command-line flags shared by the training-step benchmarks (xtrain-bench-cpu, xtrain-bench-gpu):
// the model shape, the micro-batch and the timing loop. Each program adds its own flags.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "common/job_spec.hpp"
#include "tests/worker/gpt_test_util.hpp"

namespace xtrain::bench {

struct BenchShape {
  int layers, heads, embd, seq, vocab, batch;
  int steps, warmup;  // timed steps after unmeasured warmup steps

  ModelSpec model() const { return test::model_spec(layers, heads, embd, seq, vocab); }
};

// Reads `--layers N ... --warmup N` into `shape`; any other argument goes to `extra(i)`, which
// returns true when it took argv[i] (advancing i past a value). Anything else exits 2. --help
// (-h) prints the shape flags with their defaults and `own_flags`, the program's, and exits 0.
inline void parse_bench_flags(const char* program, int argc, char** argv, BenchShape& shape,
                              const std::function<bool(int&)>& extra, const char* own_flags) {
  struct Flag {
    const char* name;
    int* value;
  } flags[] = {{"--layers", &shape.layers}, {"--heads", &shape.heads}, {"--embd", &shape.embd},
               {"--seq", &shape.seq},       {"--vocab", &shape.vocab}, {"--batch", &shape.batch},
               {"--steps", &shape.steps},   {"--warmup", &shape.warmup}};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s", program);
      for (const Flag& f : flags) std::printf(" [%s N (%d)]", f.name, *f.value);
      std::printf(" %s\n(the model shape, the micro-batch, timed steps after warm-up steps; defaults in "
                  "parentheses)\n",
                  own_flags);
      std::exit(0);
    }
    bool known = false;
    for (const Flag& f : flags) {
      if (std::strcmp(argv[i], f.name) == 0 && i + 1 < argc) {
        *f.value = std::atoi(argv[++i]);
        known = true;
        break;
      }
    }
    if (!known && !extra(i)) {
      std::fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", program, argv[i]);
      std::exit(2);
    }
  }
}

}  // namespace xtrain::bench
