// `xtrain-worker generate MODEL [--prompt TEXT | --prompt-file F] ...`: text from a model, streamed
// to stdout as it is generated, with a KV cache on the CPU (worker/cpu/kv_decoder.hpp). The usage
// text in generate_command.cpp lists the options and exit codes.
#pragma once

namespace xtrain {

// argv[0] is "generate". Returns the exit code: 0 generated, 1 runtime failure, 2 bad input (one
// "error: " line on stderr and nothing on stdout).
int run_generate(int argc, char** argv);

}  // namespace xtrain
