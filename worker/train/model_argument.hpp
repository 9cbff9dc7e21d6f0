// MODEL as the worker's commands take it (generate, export): a run directory (its newest complete
// and intact checkpoint, the one checkpoint.resume: auto would continue from), one of our
// checkpoints, a Hugging Face GPT-2 directory or an llm.c model file.
#pragma once

#include <string>

#include "common/model_file.hpp"

namespace xtrain {

// Recognises `path` and reads its shape (common/model_file.hpp). Throws FileError: for something
// that is none of the four kinds, one message naming each kind and what it would need; for a run
// directory without an intact checkpoint, or a model file that is malformed, what is wrong.
ModelFileInfo open_model_argument(const std::string& path);

}  // namespace xtrain
