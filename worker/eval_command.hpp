// `xtrain-worker eval MODEL --data GLOB [--max-tokens N] [--json]`: loss, perplexity and bits per
// byte of a model on text or token shards. The usage text in eval_command.cpp lists the options.
#pragma once

#include <string>

namespace xtrain {

// argv[0] is "eval". `openblas_choice` is choose_openblas_core's line (worker/cpu/openblas_core.hpp),
// logged after the device's where the scoring runs on the CPU. Returns the exit code: 0 scored,
// 1 runtime failure, 2 bad input (one "error: " line on stderr, nothing on stdout).
int run_eval(int argc, char** argv, const std::string& openblas_choice);

}  // namespace xtrain
