// `xtrain-worker eval MODEL --data GLOB [--max-tokens N] [--json]`: loss, perplexity and bits per
// byte of a model on text or token shards. The usage text in eval_command.cpp lists the options.
#pragma once

namespace xtrain {

// argv[0] is "eval". Returns the exit code: 0 scored, 1 runtime failure, 2 bad input (one
// "error: " line on stderr, nothing on stdout).
int run_eval(int argc, char** argv);

}  // namespace xtrain
