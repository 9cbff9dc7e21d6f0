// A spec's relative paths are read from the current directory, as torchrun's are. Run from another
// directory than the one a spec was written for, they name nothing, and the plain "No such file or
// directory" does not say why: this check says where the path was looked for and where it is.
#pragma once

#include <string>

#include "common/job_spec.hpp"

namespace xtrain::launcher {

// For each input path of our worker's spec (data.train and data.val, globs included, tokenizer,
// model.init_from, a checkpoint.resume path, train.eval_multiple_choice) that is relative and names
// nothing from the current directory, but does from the directory of the spec file `job_path` or
// one above it: throws SpecError naming the field, the current directory and the one to run from.
// A path found nowhere is left to the checks that read it.
void check_relative_paths(const JobSpec& spec, const std::string& job_path);

}  // namespace xtrain::launcher
