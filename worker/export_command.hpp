// `xtrain-worker export SOURCE --format hf|llmc OUT`: a checkpoint (or any model file that
// model.init_from takes) written as a Hugging Face GPT-2 directory or an llm.c model file.
// The usage text in export_command.cpp lists the options and exit codes.
#pragma once

namespace xtrain {

// argv[0] is "export". Returns the exit code: 0 written, 1 runtime failure, 2 bad input; every
// failure prints one "error: " line on stderr.
int run_export(int argc, char** argv);

}  // namespace xtrain
