// MODEL as the worker's commands take it (generate, eval, export): a run directory (its newest complete
// checkpoint whose model is intact, find_model_checkpoint's: the one checkpoint.resume: auto would
// continue from unless only that one's optimizer state is damaged), one of our checkpoints, a Hugging
// Face GPT-2 directory or an llm.c model file.
#pragma once

#include <optional>
#include <string>

#include "common/model_file.hpp"
#include "worker/formats/text_codec.hpp"

namespace xtrain {

// Recognises `path` and reads its shape (common/model_file.hpp). Throws FileError: for something
// that is none of the four kinds, one message naming each kind and what it would need; for a run
// directory without an intact checkpoint, or a model file that is malformed, what is wrong.
ModelFileInfo open_model_argument(const std::string& path);

// The tokenizer a command uses with `model` (worker/formats/text_codec.hpp: GPT-2's vocabulary
// files or llm.c's tokenizer file): the one --tokenizer (`flag_path`) names where given, else the
// model's own (its directory's, which for a checkpoint is its run's, or the llm.c tokenizer file
// beside an llm.c model file); nullopt where neither names one. BadInput naming where it came from
// when it cannot be loaded or its vocabulary is not the model's.
std::optional<TextCodec> model_tokenizer(const ModelFileInfo& model, const std::string& flag_path);

}  // namespace xtrain
